"""The catalogue of checks: every way ASTRA-sim (2.0, analytical) is known to crash or silently
misbehave on a trace set, each with what the simulator does and the fix.

Severity:

- ``fails``: ASTRA-sim aborts, exits non-zero, or a rank never prints its ``finished`` line;
- ``wrong``: it runs to the end but simulates something other than the trace says;
- ``note``: worth knowing, nothing to fix.
"""

from __future__ import annotations

from typing import NamedTuple

FAILS, WRONG, NOTE = "fails", "wrong", "note"
SEVERITIES = (FAILS, WRONG, NOTE)


class Check(NamedTuple):
    code: str
    severity: str
    problem: str      # "{n}" = how many; "{examples}" = the first instances
    effect: str       # what ASTRA-sim does; "{arg}" = the first instance's argument
    fix: str          # what the user should do (or what --fix does)
    fixable: bool     # --fix repairs it


_C = [
    Check("unreadable", FAILS, "{examples}",
          "ASTRA-sim parses damaged messages without checking, so it reads partial nodes silently or stops",
          "re-create or re-copy the file", False),
    Check("missing-rank", FAILS, "rank files missing: {examples}",
          'aborts at start: "Failed to open file" (one file per NPU is opened, PREFIX.RANK.et)',
          "provide a file for every rank 0..N-1", False),
    Check("gzipped", FAILS, "{n} rank files exist only gzipped ({examples})",
          'aborts at start: "Failed to open file": it opens PREFIX.RANK.et and cannot read gzip',
          "gunzip copies of the files", True),
    Check("rank-count", FAILS, "{examples}",
          "{arg}", "use a network with as many NPUs as the set has ranks", False),
    Check("empty-rank", FAILS, "the rank file has no node",
          'aborts at start: "No dependancy free nodes found, there might be deadlocks"',
          "give the rank one zero-duration compute node", True),
    Check("unknown-node-type", FAILS, "{n} nodes of a type the schema does not define ({examples})",
          'exits 1 at the node: "Unknown node type"', "fix the trace generator", False),
    Check("duplicate-id", WRONG, "{n} node ids appear more than once ({examples})",
          "keeps only the last record of each id, with the dependencies of all of them merged: "
          "the other records never run", "give every node a unique id", False),
    Check("dangling-dep", FAILS, "{n} dependencies on node ids absent from the file ({examples})",
          'aborts at start: "Node {arg} graph, but not found in index, file might be corrupted"',
          "drop those dependencies", True),
    Check("self-dep", WRONG, "{n} nodes depend on themselves ({examples})",
          "the node never becomes ready: it and every node after it ({arg} nodes in all) are skipped "
          "silently, and the rank still prints finished", "drop the self dependencies", True),
    Check("cycle", WRONG, "{examples}",
          "the nodes of the cycle never become ready: they and every node after them ({arg} nodes in all) "
          "are skipped silently, and the rank still prints finished", "remove one dependency of the cycle", False),
    Check("no-ready-node", FAILS, "no node is free of dependencies",
          'aborts at start: "No dependancy free nodes found, there might be deadlocks"',
          "break the dependency cycles", False),
    Check("metadata-node", FAILS, "{n} METADATA nodes ({examples})",
          'aborts at the node: "Invalid node_type, node.id={arg}, node.type=1" (Statistics.cc asserts)',
          "remove them; their dependents inherit their dependencies", True),
    Check("invalid-node", FAILS, "{n} INVALID nodes ({examples})",
          "skips the node without issuing its children: the rank stalls and never prints finished, or aborts "
          "when its statistics are collected", "remove them; their dependents inherit their dependencies", True),
    Check("mem-node", FAILS, "{n} MEM_LOAD/MEM_STORE nodes ({examples})",
          'exits 1: "Remote memory access is not supported in NO_MEMORY_EXPANSION"',
          "remove them (their memory time is not simulated); their dependents inherit their dependencies", True),
    Check("is-cpu-op-type", FAILS, "{n} nodes whose is_cpu_op is not a bool or integer ({examples})",
          "aborts: {arg}", "write is_cpu_op as a bool (bool_val)", True),
    Check("comm-on-cpu", FAILS, "{n} communication nodes with is_cpu_op true ({examples})",
          'throws "Comm node should not be on CPU": aborts, or the rank stalls if it is issued later',
          "set is_cpu_op false on communication nodes", True),
    Check("comm-type-missing", FAILS, "{n} collectives without comm_type ({examples})",
          'throws "Attribute comm_type not found in node {arg}": aborts or the rank stalls',
          "give every COMM_COLL node its comm_type", False),
    Check("comm-type-convertible", FAILS, "{n} collectives of a kind ASTRA-sim does not simulate ({examples})",
          'throws "Unsupported collective comm type": aborts or the rank stalls',
          "REDUCE_SCATTER_BLOCK becomes REDUCE_SCATTER, BARRIER a zero-byte ALL_REDUCE", True),
    Check("comm-type-unsupported", FAILS, "{n} collectives of a kind ASTRA-sim does not simulate ({examples})",
          'throws "Unsupported collective comm type": aborts or the rank stalls',
          "replace them in the trace (e.g. REDUCE by ALL_REDUCE, GATHER/SCATTER by ALL_GATHER)", False),
    Check("broadcast-replayed", WRONG, "{n} BROADCAST collectives ({examples})",
          "replays them for their duration_micros (1 ns when 0) as communication time: no traffic is simulated",
          "replace them by a simulated collective if the traffic matters", False),
    Check("attr-type", FAILS, "{n} attributes of a type ASTRA-sim cannot convert to an integer ({examples})",
          "aborts: std::bad_cast (only integer kinds convert)", "write them as int64_val", True),
    Check("comm-size-missing", FAILS, "{n} collectives without comm_size ({examples})",
          'throws "Attribute comm_size not found in node {arg}": aborts or the rank stalls',
          "give every COMM_COLL node its comm_size in bytes", False),
    Check("size-not-divisible", WRONG, "{n} collective sizes not divisible by the {arg} chunks ({examples})",
          "cuts size // {arg}-byte chunks and charges the remainder as one more full chunk (up to 1/{arg} more time)",
          "round sizes to a multiple of the chunk count", True),
    Check("involved-dim-type", FAILS, "{n} collectives whose involved_dim is not a bool_list ({examples})",
          'exits 1: "Expected bool_list in involved_dim but found another type."',
          "write involved_dim as a bool_list, one entry per network dimension", False),
    Check("no-involved-dim", FAILS, "{n} collectives that reach no other NPU ({examples})",
          "the collective generates no transfer and never finishes: the rank stalls and never prints finished",
          "replace them by zero-duration compute nodes", True),
    Check("involved-dim-absent", FAILS, "{n} collectives without involved_dim on a network of {arg} dimensions "
          "({examples})", "uses a default of 4 entries and reads past it (undefined behaviour)",
          "set involved_dim, one entry per network dimension (--fix sets all of them)", True),
    Check("involved-dim-length", FAILS, "{n} collectives whose involved_dim is shorter than the network's {arg} "
          "dimensions ({examples})", "reads past the list (undefined behaviour)",
          "give involved_dim one entry per network dimension", False),
    Check("involved-dim-extra", WRONG, "{n} collectives name dimensions beyond the network's {arg} ({examples})",
          "ignores the entries past the network's dimensions", "regenerate the trace for this network", False),
    Check("pg-name-type", FAILS, "{n} collectives whose pg_name is not a string ({examples})",
          "aborts: std::bad_cast (pg_name is read as a string)", "write pg_name as a string (string_val)", True),
    Check("pg-name-non-numeric", FAILS, "{n} collectives whose pg_name is not a number ({examples})",
          "aborts: std::invalid_argument from std::stoi (group ids are integers)",
          "name communicator groups by positive integers", False),
    Check("pg-name-suffix", WRONG, "{n} collectives whose pg_name has trailing characters ({examples})",
          "std::stoi reads the leading number only", "write the group id alone", False),
    Check("unknown-group", FAILS, "{n} collectives on groups the communicator-group file does not define "
          "({examples})", 'exits 1: "For rank {arg} not found"', "add the group to the communicator-group file", False),
    Check("group-in-metadata-only", FAILS, "{n} collectives on groups that only the trace's METADATA process groups "
          "define ({examples})", 'exits 1: "For rank {arg} not found" (it reads groups only from '
          "--comm-group-configuration)", "write the METADATA groups to a communicator-group file", True),
    Check("not-member", FAILS, "{n} collectives on groups that do not contain this rank ({examples})",
          "aborts: assert(index_in_ring >= 0) in RingTopology", "fix the trace or the communicator-group file", False),
    Check("collective-count", FAILS, "the ranks of a group issue different numbers of collectives on it "
          "({examples})", "matches collectives across ranks by issue order: the ranks with more wait for partners "
          "that never come, stall and never print finished", "give every member the same collectives in the same order",
          False),
    Check("group-of-one", FAILS, "{n} collectives on one-member groups ({examples})",
          "the collective generates no transfer and never finishes: the rank stalls and never prints finished",
          "replace them by zero-duration compute nodes", True),
    Check("groups-path-empty", FAILS, "the communicator-group file's path contains \"empty\" ({examples})",
          "ignores the file (any path containing \"empty\" means no groups), so every group is unknown",
          "rename the file or its directory", True),
    Check("group-id", FAILS, "{n} communicator groups with an id that is not a positive integer ({examples})",
          "aborts while loading the file: assert(id > 0), or std::stoi throws",
          "drop or renumber them (pg_name \"\" or \"0\" already means all ranks)", True),
    Check("group-members", WRONG, "{n} communicator groups with members that are not NPUs of the set "
          "({examples})", "loads the group; a collective on it reads out of range or aborts",
          "list NPU ids 0..N-1, each once", False),
    Check("p2p-attr-missing", FAILS, "{n} sends/receives without a required attribute ({examples})",
          'throws "Attribute {arg} not found in node ...": aborts or the rank stalls',
          "give SEND comm_dst, comm_tag, comm_size and RECV comm_src, comm_tag, comm_size", False),
    Check("p2p-wrong-rank", FAILS, "{n} sends/receives that name another rank as their own end or a peer "
          "outside the set ({examples})", 'throws "{arg}": aborts or the rank stalls',
          "SEND's comm_src (RECV's comm_dst) must be the rank of its file, the peer a rank of the set", False),
    Check("p2p-size-zero", FAILS, "{n} sends/receives of 0 bytes ({examples})",
          "aborts: assert(chunk_size > 0)", "give them a size of at least 1 byte or remove them", False),
    Check("p2p-unmatched-recv", FAILS, "{n} receives with no send of the same (tag, src, dst, size) ({examples})",
          "the receive never completes: the rank stalls and never prints finished",
          "make tag, peers and size agree with a send on the source rank", False),
    Check("p2p-unmatched-send", WRONG, "{n} sends with no receive of the same (tag, src, dst, size) "
          "({examples})", "the send is charged its transfer and completes; nothing waits for it",
          "add the receive or remove the send", False),
    Check("cpu-ops", NOTE, "{n} CPU ops (is_cpu_op true)",
          "replays them one at a time beside GPU compute and counts their time as exposed communication; "
          "the rank prints finished but no Wall/CPU/GPU/Comm statistics", "nothing to fix", False),
    Check("gloo-cpu-collectives", NOTE, "{n} collectives recorded as CPU ops ({examples})",
          "replays them for their recorded duration: no traffic is simulated",
          "type them as collectives: --type-cpu-collectives on demand, optimize, loop (the converter only "
          "types NCCL kernels)", False),
]

# With --system FILE: the system.json against the set's collectives and the network (doctor/system_checks.py).
# Every effect was measured on the 518bd51 analytical congestion-unaware binary.
_RUNS_NOTHING = 'exit 0, "Hardware Resource ... has unreleased nodes", no rank finished'
_SYSTEM = [
    Check("implementation-long", FAILS, "{examples}",
          "aborts at start: assertion `collective_impl.size() <= dimension_size.size()` (GeneralComplexTopology)",
          "give one entry per network dimension", False),
    Check("no-implementation", FAILS, "{n} collectives of a kind the system file has no implementation for "
          "({examples})", 'throws "No collective implementation found for the given type": ' + _RUNS_NOTHING,
          "add the kind's *-implementation list, one name per network dimension", False),
    Check("splits-invalid", FAILS, "{examples}", "{arg}", "set preferred-dataset-splits to an integer >= 1", False),
    Check("endpoint-delay-negative", FAILS, "{examples}",
          "aborts at the first collective: assertion `event_time_ns >= event_queue->get_current_time()` "
          "(CommonNetworkApi::sim_schedule)", "set endpoint-delay to an integer number of ns >= 1", False),
    Check("endpoint-delay-zero", FAILS, "{n} collectives with no dependency, so they start at t = 0, with "
          "endpoint-delay 0 ({examples})", "aborts: assertion `current_event_list.get_event_time() > current_time` "
          "(EventQueue::proceed: an event at t = 0)", "set endpoint-delay to 1 ns or more", False),
    Check("active-chunks-invalid", FAILS, "{examples}", "no collective phase is ever started: " + _RUNS_NOTHING,
          "set active-chunks-per-dimension to 1 (or more)", False),
    Check("no-phase", FAILS, "{n} collectives that run on no dimension under the system file ({examples})",
          "the collective generates no phase and never finishes: " + _RUNS_NOTHING,
          "give every dimension an implementation (a one* entry makes its dimension the whole machine: that "
          "involved_dim entry must be true)", False),
    Check("hd-all-to-all", FAILS, "{n} ALL_TO_ALL collectives with halvingDoubling ({examples})",
          'exits 1: "Exiting because of unknown communication type for HalvingDoubling collective algorithm"',
          "use ring or direct in all-to-all-implementation", False),
    Check("hd-not-power-of-two", FAILS, "{n} collectives with halvingDoubling on a ring whose size is not a power "
          "of two ({examples})", "its log2 steps are truncated and the phase never completes: " + _RUNS_NOTHING,
          "use ring or direct there (ASTRA-sim checks nothing)", False),
    Check("tree-not-power-of-two", FAILS, "{n} collectives with doubleBinaryTree on a dimension whose size is not a "
          "power of two ({examples})", "segmentation fault", "use ring there (ASTRA-sim checks nothing)", False),
    Check("tree-sub-group", FAILS, "{n} sub-group collectives with a one-entry doubleBinaryTree list ({examples})",
          "segmentation fault: the group's ring topology is used as a tree",
          "use ring for that kind (sub-groups run one ring over their members)", False),
    Check("optimization-absent", FAILS, "{n} ALL_REDUCE collectives on several dimensions without "
          "collective-optimization ({examples})", "the optimization is left uninitialized: " + _RUNS_NOTHING,
          "set collective-optimization to localBWAware (hierarchical) or baseline", False),
    Check("all-gather-small", FAILS, "{n} ALL_GATHER collectives smaller than the {arg} splits ({examples})",
          "cuts 0-byte chunks: the collective never ends (the run hangs, or exits 0 with no rank finished)",
          "give all-gathers at least preferred-dataset-splits bytes, or lower the splits", False),
    Check("roofline-attrs", FAILS, "{n} GPU compute nodes without num_ops or a tensor_size > 0 under "
          "roofline-enabled ({examples})", "throws \"Attribute num_ops not found\" (aborts); a tensor_size of 0 "
          "skips the node without its children, and no rank finishes",
          "give GPU compute nodes num_ops and tensor_size, or set roofline-enabled to 0", False),
    Check("roofline-zero", FAILS, "{examples} under roofline-enabled, with {arg} GPU compute nodes",
          "a GPU compute node takes num_ops / 0 seconds: aborts (assertion in EventQueue::proceed)",
          "set peak-perf (TFLOPS) and local-mem-bw (GB/s) above 0", False),
    Check("replay-only", WRONG, "replay-only is on and the set has {arg} communication nodes",
          "replays every node for its duration_micros (1 ns when 0): collectives, sends and receives move no bytes",
          "set replay-only to 0", False),
    Check("flag-false-on", WRONG, "{examples}", "turns a flag on for any value but the number 0 (false, null and "
          "strings included)", "write the flag as 0 or 1", False),
    Check("int-wrapped", WRONG, "{examples}", "reads the value into a C int, which wraps around",
          f"give a value from 0 to {2**31 - 1:,}", False),
    Check("local-mem-bw-zero", WRONG, "{n} collectives that reduce, with local-mem-bw {arg} ({examples})",
          "divides by zero; this build then charges every reduction 0 ns (the time is optimistic)",
          "set local-mem-bw to the local memory bandwidth in GB/s", False),
    Check("implementation-short", WRONG, "{n} collectives on dimensions the implementation list leaves out "
          "({examples})", "runs them on the listed dimensions only: their traffic on the others is never simulated",
          "give one entry per network dimension", False),
    Check("tree-as-all-reduce", WRONG, "{n} collectives with phases other than all-reduce on doubleBinaryTree "
          "({examples})", "every tree phase is a full all-reduce of its chunk: a reduce-scatter, all-gather or "
          "all-to-all (or the reduce-scatter and all-gather halves of a hierarchical all-reduce) moves 2x or more "
          "the bytes", "use doubleBinaryTree only where a phase is an all-reduce: all-reduce-implementation's last "
          "dimension, or every dimension with collective-optimization baseline", False),
    Check("direct-unaware", WRONG, "{n} collectives with direct on more than 2 NPUs ({examples})",
          "the congestion-unaware backend charges the n - 1 messages of a step as one: up to n - 1 times faster "
          "than real links", "use ring when the simulated time must be bytes / bandwidth", False),
    Check("active-chunks", WRONG, "{examples} with {arg} splits",
          "runs that many chunks of a dimension at once, each at the full link bandwidth on the congestion-unaware "
          "backend: up to that many times faster than real links",
          "set active-chunks-per-dimension to 1 when the time must be bytes / bandwidth", False),
    Check("one-flattened", WRONG, "{n} collectives flattened by a one* implementation into one ring over the "
          "{arg} NPUs ({examples})", "the dimensions are not used one by one: oneRing sends every message over "
          "dimension 0's links (the others' bandwidths never count), oneDirect and oneHalvingDoubling charge each "
          "message on the lowest dimension where the ids differ; a collective that leaves dimensions out of "
          "involved_dim still spans all NPUs", "use per-dimension names (ring, direct, halvingDoubling)", False),
    Check("sub-group-ring", WRONG, "{n} sub-group collectives whose implementation list is replaced by ring "
          "({examples})", "a group that is not the whole system runs one ring over its members in group-file "
          "order: a list of several names is ignored (a one-entry list is used as written)",
          "expect ring timing for sub-groups, or give that kind a one-entry list", False),
    Check("sub-group-endpoint-delay", WRONG, "{n} sub-group collectives with endpoint-delay {arg} ({examples})",
          "their memory bus costs a fixed 10 ns per message, not endpoint-delay",
          "nothing in the system file changes it: expect 10 ns", False),
    Check("key-typo", WRONG, "{n} keys ASTRA-sim does not read, close to keys it reads ({examples})",
          "ignores them: the intended settings keep their defaults", "correct the keys", False),
    Check("setting-ignored", WRONG, "{n} settings ASTRA-sim 518bd51 does not read from this file, asking for "
          "something else than what it does ({examples})", "ignores them: {arg}",
          "remove them; the simulated time is for what ASTRA-sim does", False),
    Check("key-ignored", NOTE, "{n} keys ASTRA-sim 518bd51 does not read ({examples})", "ignores them",
          "nothing to fix", False),
    Check("policy-absent", NOTE, "scheduling-policy is absent",
          "leaves it uninitialized; this build runs LIFO, which changes nothing for traces (a rank runs one "
          "collective at a time)", "set it", False),
    Check("roofline-on", NOTE, "{n} GPU compute nodes timed by the roofline",
          "takes num_ops / min(peak-perf, local-mem-bw x num_ops / tensor_size); duration_micros is ignored",
          "nothing to fix", False),
    Check("custom-splits", FAILS, "{n} collectives with a custom ET program and preferred-dataset-splits {arg} "
          "({examples})", "waits for that many streams of the collective but runs one: the rank stops there, prints "
          "\"unreleased nodes\" and never finished", "set preferred-dataset-splits to 1", False),
    Check("custom-implementation", NOTE, "{n} collectives run a custom ET program ({examples})",
          "opens PREFIX.POS.et (POS: the rank's position in its group) from its working directory and exits 1 if "
          "it is missing; the collective's comm_size is ignored: the program's sends are the traffic",
          "nothing to fix when the files are there", False),
    Check("per-node-custom", NOTE, "per-node-custom-implementation {examples}",
          "collectives whose node id it lists run that ET program (the doctor does not read it)", "nothing to fix",
          False),
    Check("no-network", NOTE, "the implementation lists were not checked against the network's dimensions",
          "list lengths, power-of-two sizes, flattening and sub-group sizes need them", "give --network", False),
]
SYSTEM_CODES = tuple(c.code for c in _SYSTEM)
CHECKS: dict[str, Check] = {c.code: c for c in _C + _SYSTEM}
