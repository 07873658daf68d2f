"""Named power figures for NPUs and link classes, each with the public figure it comes from.

Every figure is rounded and meant as a starting point for a study, not as a measurement of one
machine: replace it with your own in the power file when you have one. Two assumptions recur:

- *Idle draw of links.* SerDes, retimers and optical modules are not power-gated between
  collectives on today's parts (they keep the link trained), so a provisioned link draws most of
  its power whether it moves data or not. The presets take the idle draw as 80 % of the
  transferring draw (an assumption, not a datasheet figure); a link's energy while it transfers
  is the pJ/bit figure.
- *End to end.* A class's pJ/bit is for one bit sent by one NPU through that class: both link
  ends (the sender's and the receiver's PHY or module) and, for switch classes, the switch.

Units: pJ per bit; W per GB/s of per-NPU bandwidth (1 pJ/bit = 0.008 W per GB/s); W per NPU; W per
switch chip.
"""

from __future__ import annotations

IDLE_SHARE = 0.8           # see the module docstring: links draw 80 % of their transferring power when idle
W_PER_GBPS_PER_PJ_PER_BIT = 8e-3    # 1 pJ/bit x 8 bit/byte x 1e9 byte/s = 8 mW per GB/s


def _link(pj_per_bit: float, **extra: float) -> dict[str, float]:
    """A link part at ``pj_per_bit`` end to end, idle at IDLE_SHARE of that rate's power."""
    return {"link_pj_per_bit": pj_per_bit,
            "link_idle_w_per_gbps": IDLE_SHARE * pj_per_bit * W_PER_GBPS_PER_PJ_PER_BIT, **extra}


# NPUs: active_w while computing, idle_w otherwise, rest_of_node_w drawn all the time (host CPUs,
# memory, fans, power-supply loss, the node's share of NICs and NVSwitch trays unless the fabric
# classes count them: then lower it).
NPU_PRESETS: dict[str, dict[str, float]] = {
    # NVIDIA A100 SXM4 datasheet: 400 W max TDP. Idle: about 55 W as reported by nvidia-smi on idle
    # DGX A100 systems (rounded). Rest of node: DGX A100 datasheet, 6.5 kW max system power for 8
    # GPUs: (6,500 - 8 x 400) / 8 = 412 W per GPU.
    "A100": {"active_w": 400.0, "idle_w": 55.0, "rest_of_node_w": 412.0},
    # NVIDIA H100 SXM5 datasheet: up to 700 W TDP. Idle about 70 W (nvidia-smi on idle HGX H100,
    # rounded). Rest of node: DGX H100 datasheet, about 10.2 kW max for 8 GPUs:
    # (10,200 - 8 x 700) / 8 = 575 W per GPU.
    "H100": {"active_w": 700.0, "idle_w": 70.0, "rest_of_node_w": 575.0},
    # NVIDIA HGX/DGX B200 material: up to 1,000 W per B200 GPU. Idle taken as 14 % of TDP as for
    # H100 (70 / 700 W; an assumption). Rest of node: DGX B200 datasheet, about 14.3 kW max for
    # 8 GPUs: (14,300 - 8 x 1,000) / 8 = 787 W per GPU.
    "B200": {"active_w": 1000.0, "idle_w": 140.0, "rest_of_node_w": 787.0},
}

# Link classes (keys as in a power file's class entry).
LINK_PRESETS: dict[str, dict[str, float]] = {
    # On-package die-to-die: NVIDIA NVLink-C2C, 1.3 pJ/bit (Grace Hopper Superchip, NVIDIA
    # Hot Chips 34, 2022). UCIe-class links are quoted at 0.5-1 pJ/bit.
    "nvlink-c2c": _link(1.3),
    # Board-level NVLink through NVSwitch (A100 / H100 / B200 generations). Link: 100-200 Gb/s
    # PAM4 SerDes over board traces, about 5 pJ/bit per PHY in the ISSCC SerDes surveys of those
    # nodes, two PHYs per hop: 10 pJ/bit. Switch: the NVSwitch chips of the HGX baseboard; their
    # SerDes at the same 5 pJ/bit per PHY twice (in and out) plus crossbar: 12 pJ/bit. The
    # generations differ mainly in rate, and per bit by the process node (about -15 % per
    # generation, rounded).
    "nvlink3-nvswitch2": _link(11.5, switch_pj_per_bit=14.0, switch_idle_w_per_gbps=IDLE_SHARE * 14.0 * 8e-3),
    "nvlink4-nvswitch3": _link(10.0, switch_pj_per_bit=12.0, switch_idle_w_per_gbps=IDLE_SHARE * 12.0 * 8e-3),
    "nvlink5-nvswitch4": _link(8.5, switch_pj_per_bit=10.0, switch_idle_w_per_gbps=IDLE_SHARE * 10.0 * 8e-3),
    # PCIe Gen5 x16 between packages (a PCIe switch in the path): NVIDIA quotes NVLink-C2C (1.3
    # pJ/bit) as 25x more energy efficient than PCIe Gen5 on its chips, about 30 pJ/bit for
    # controller plus PHY at both ends.
    "pcie5": _link(30.0),
    # InfiniBand NDR / 400G Ethernet over copper (DAC, at most a few metres): the host NIC and the
    # switch port SerDes at about 5 pJ/bit each, twice per hop through one switch: 20 pJ/bit in
    # links. Switch: a 51.2 Tb/s switch ASIC at about 500 W (Broadcom Tomahawk 5 class
    # announcements): 500 W / 51.2 Tb/s ~ 10 pJ/bit. NIC: a 400G ConnectX-7-class NIC at about
    # 25 W / 400 Gb/s ~ 60 pJ/bit, drawn whether or not it sends (idle at IDLE_SHARE too).
    "ib-ndr-copper": _link(20.0, switch_pj_per_bit=10.0, switch_idle_w_per_gbps=IDLE_SHARE * 10.0 * 8e-3,
                           nic_pj_per_bit=60.0, nic_idle_w_per_gbps=IDLE_SHARE * 60.0 * 8e-3),
    "ethernet-400g-copper": _link(20.0, switch_pj_per_bit=10.0, switch_idle_w_per_gbps=IDLE_SHARE * 10.0 * 8e-3,
                                  nic_pj_per_bit=60.0, nic_idle_w_per_gbps=IDLE_SHARE * 60.0 * 8e-3),
    # The same with pluggable optics: a 400G OSFP/QSFP-DD module at about 8 W (vendor datasheets
    # of DR4/SR4 modules) is 20 pJ/bit, one at each end of each of the two hops through the
    # switch: 80 pJ/bit, on top of the 20 pJ/bit of electrical SerDes.
    "ib-ndr-optics": _link(100.0, switch_pj_per_bit=10.0, switch_idle_w_per_gbps=IDLE_SHARE * 10.0 * 8e-3,
                           nic_pj_per_bit=60.0, nic_idle_w_per_gbps=IDLE_SHARE * 60.0 * 8e-3),
    "ethernet-400g-optics": _link(100.0, switch_pj_per_bit=10.0, switch_idle_w_per_gbps=IDLE_SHARE * 10.0 * 8e-3,
                                  nic_pj_per_bit=60.0, nic_idle_w_per_gbps=IDLE_SHARE * 60.0 * 8e-3),
    # Co-packaged optics on the switch (NVIDIA Quantum-X / Spectrum-X Photonics, GTC 2025: 3.5x
    # the power efficiency of pluggable optics): the switch-side modules at 20 / 3.5 ~ 6 pJ/bit,
    # the NIC side still pluggable: 2 x 20 + 2 x 6 = 52 pJ/bit of optics plus 20 of SerDes.
    "cpo-switch": _link(72.0, switch_pj_per_bit=10.0, switch_idle_w_per_gbps=IDLE_SHARE * 10.0 * 8e-3,
                        nic_pj_per_bit=60.0, nic_idle_w_per_gbps=IDLE_SHARE * 60.0 * 8e-3),
}
