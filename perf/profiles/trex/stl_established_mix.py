"""TRex STL: established TCP connections toward a border VIP from random clients.

border keeps per-flow state and, on a full-NAT VIP (the example config's),
drops a mid-stream segment of a connection it never saw a SYN for
(drop_no_conntrack; a DNAT VIP would pick a backend for it instead). So
every flow here is a whole connection, in order:

    SYN  ->  ACK  ->  data (PSH+ACK)  ->  FIN+ACK

Four chained burst streams send the four packets of `--flows` connections,
phase by phase (all SYNs, then all ACKs, ...), then loop. Each stream draws
the client address and port from a repeatable random sequence with the same
seeds, so packet i of every phase belongs to the same connection (also with
several TRex cores: every stream is split across them the same way, and a
core derives its sequence from the seed alone). The sequence comes round
again after --flows connections; border then sees a SYN on the closing entry
of the earlier connection and picks afresh, like a client reusing a port.

STL is stateless: the backend's SYN-ACK, ACKs and RSTs go unanswered, which
border does not mind (its connection table follows flags, not sequence
numbers). On a PROXY-protocol VIP the data segment, the first at the
client's ISN + 1, carries the header (pp_headers_inserted) and the FIN is
moved past it. For real TCP use astf_http.py.

New connections per second = --cps (each stream sends at 4 x cps), about
--flows of them in border's table at any time.

    trex> start -f perf/profiles/trex/stl_established_mix.py -p 0 \
              -t --vip 10.10.0.100 --cps 100000 --flows 100000
"""

import argparse
import os

from trex_stl_lib.api import (
    CTRexVmInsFixHwCs,
    IP,
    TCP,
    STLPktBuilder,
    STLProfile,
    STLStream,
    STLTXSingleBurst,
    STLVM,
    Ether,
)

# The four packets of a connection, in the order they are sent.
PHASES = ("syn", "ack", "data", "fin")


class BorderEstablishedMix(object):
    def template(self, phase, args):
        """The packet of one phase; the client address and port are overwritten."""
        payload = self.request(args)
        seq = args.isn + 1
        if phase == "syn":
            tcp = TCP(flags="S", seq=args.isn, window=64240, options=[("MSS", 1460)])
            payload = b""
        elif phase == "ack":
            tcp = TCP(flags="A", seq=seq, ack=1, window=64240)
            payload = b""
        elif phase == "data":
            tcp = TCP(flags="PA", seq=seq, ack=1, window=64240)
        else:
            tcp = TCP(flags="FA", seq=seq + len(payload), ack=1, window=64240)
            payload = b""
        tcp.sport = 1025
        tcp.dport = args.vip_port
        return Ether() / IP(dst=args.vip) / tcp / payload

    def request(self, args):
        """An HTTP GET of --payload bytes (at least the request line and Host)."""
        head = "GET / HTTP/1.1\r\nHost: {}\r\nX-Pad: ".format(args.vip)
        pad = max(0, args.payload - len(head) - 4)
        return (head + "x" * pad + "\r\n\r\n").encode("ascii")

    def vm(self, args):
        """Same seeds in every phase: packet i of each phase is connection i."""
        vm = STLVM()
        vm.repeatable_random_var(fv_name="client", size=4, limit=args.flows,
                                 seed=args.seed, min_value=args.client_min,
                                 max_value=args.client_max)
        vm.repeatable_random_var(fv_name="sport", size=2, limit=args.flows,
                                 seed=(args.seed + 1) & 0xFFFF,
                                 min_value=args.sport_min, max_value=args.sport_max)
        vm.write(fv_name="client", pkt_offset="IP.src")
        vm.write(fv_name="sport", pkt_offset="TCP.sport")
        vm.fix_chksum_hw(l3_offset="IP", l4_offset="TCP",
                         l4_type=CTRexVmInsFixHwCs.L4_TYPE_TCP)
        return vm

    def create_streams(self, args):
        streams = []
        for i, phase in enumerate(PHASES):
            streams.append(STLStream(
                name=phase,
                self_start=(i == 0),
                isg=args.gap_us,
                packet=STLPktBuilder(pkt=self.template(phase, args), vm=self.vm(args)),
                mode=STLTXSingleBurst(total_pkts=args.flows, pps=4 * args.cps),
                next=PHASES[(i + 1) % len(PHASES)],
                action_count=args.rounds if phase == "fin" else 0))
        return STLProfile(streams).get_streams()

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
        parser.add_argument("--flows", type=int, default=10000,
                            help="connections per phase burst; distinct tuples in the sequence")
        parser.add_argument("--cps", type=float, default=10000,
                            help="new connections per second (start -m scales it)")
        parser.add_argument("--payload", type=int, default=64,
                            help="bytes of the HTTP request in the data segment")
        parser.add_argument("--isn", type=int, default=1000, help="client initial sequence number")
        parser.add_argument("--gap-us", type=float, default=0.0,
                            help="pause before each phase, microseconds")
        parser.add_argument("--rounds", type=int, default=0,
                            help="rounds before stopping (0: until stopped)")
        parser.add_argument("--seed", type=int, default=0x1234,
                            help="seed of the client sequence (16 bits)")
        args = parser.parse_args(list(tunables))
        return self.create_streams(args)


def register():
    return BorderEstablishedMix()
