"""TRex STL: UDP flood toward a border VIP from random clients.

Every packet comes from a random client address and source port, so border
sees a new flow per packet (new_flows, conntrack occupancy, udp timeout
expiry). The example config's VIP is TCP only: against it this profile
measures the drop path (drop_vip_unhandled); add a `protocol = "udp"` VIP
and pass its port to measure forwarding.

    trex> start -f perf/profiles/trex/stl_udp_flood.py -p 0 -m 1mpps \
              -t --vip 10.10.0.100 --vip-port 80 --size 64
"""

import argparse
import os

from trex_stl_lib.api import (
    CTRexVmInsFixHwCs,
    IP,
    STLPktBuilder,
    STLStream,
    STLTXCont,
    STLVM,
    UDP,
    Ether,
)


class BorderUdpFlood(object):
    def create_stream(self, args):
        base = Ether() / IP(dst=args.vip) / UDP(sport=1025, dport=args.vip_port)
        # Frame size without the 4-byte FCS the NIC appends.
        pad = max(0, args.size - 4 - len(base)) * b"x"

        vm = STLVM()
        vm.var(name="client", min_value=args.client_min, max_value=args.client_max,
               size=4, op="random")
        vm.var(name="sport", min_value=args.sport_min, max_value=args.sport_max,
               size=2, op="random")
        vm.write(fv_name="client", pkt_offset="IP.src")
        vm.write(fv_name="sport", pkt_offset="UDP.sport")
        # Last: the IPv4 header checksum (border drops bad ones) and UDP's.
        vm.fix_chksum_hw(l3_offset="IP", l4_offset="UDP",
                         l4_type=CTRexVmInsFixHwCs.L4_TYPE_UDP)

        return STLStream(packet=STLPktBuilder(pkt=base / pad, vm=vm),
                         random_seed=args.seed,
                         mode=STLTXCont(pps=args.pps))

    def get_streams(self, tunables=(), **kwargs):
        parser = argparse.ArgumentParser(
            description="Argparser for {}".format(os.path.basename(__file__)),
            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        parser.add_argument("--vip", default="10.10.0.100", help="VIP address")
        parser.add_argument("--vip-port", type=int, default=80, help="VIP port")
        parser.add_argument("--client-min", default="16.0.0.1", help="lowest client address")
        parser.add_argument("--client-max", default="16.255.255.254", help="highest client address")
        parser.add_argument("--sport-min", type=int, default=1024, help="lowest client port")
        parser.add_argument("--sport-max", type=int, default=65535, help="highest client port")
        parser.add_argument("--size", type=int, default=64, help="frame size in bytes, FCS included")
        parser.add_argument("--pps", type=float, default=1000000,
                            help="packets per second (start -m scales it)")
        parser.add_argument("--seed", type=int, default=0x1234,
                            help="random seed: the same client sequence every run")
        args = parser.parse_args(list(tunables))
        return [self.create_stream(args)]


def register():
    return BorderUdpFlood()
