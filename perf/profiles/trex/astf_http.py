"""TRex ASTF: real HTTP/1.1 connections through a border VIP.

TRex's TCP stack is both the clients (port 0, facing border's "ext" port)
and the backends (port 1, facing "int"): clients open connections to the
VIP, border picks a backend and rewrites the packets, the server side
accepts them on --backend-ports (any address: the backends in border's
config are port 1's address on these ports), answers each GET, and the
client closes. Every connection is a full handshake, --requests
request/response exchanges and a FIN in each direction, so border's table
goes through every TCP state.

With `proxy_protocol = "v2"` (the example config) the backend receives a
PROXY v2 header before the first request: --proxy-header-len bytes (28 for
TCP over IPv4 without TLVs; 0 for `proxy_protocol = "none"`). The server
program waits for those bytes too, so a wrong value stalls the connections
(visible as TRex's tcps_rcvtotal without responses).

    trex> start -f perf/profiles/trex/astf_http.py -m 10000 -d 60 \
              -t --vip 10.10.0.100 --backend-ports 8080,8081,8082
"""

import argparse
import os

from trex.astf.api import (
    ASTFAssociationRule,
    ASTFIPGen,
    ASTFIPGenDist,
    ASTFIPGenGlobal,
    ASTFProfile,
    ASTFProgram,
    ASTFTCPClientTemplate,
    ASTFTCPServerTemplate,
    ASTFTemplate,
)


def ports(text):
    """`8080,8081` -> [8080, 8081]."""
    try:
        values = [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("not a comma-separated list of ports: " + text)
    if not values or any(not 0 < p < 65536 for p in values):
        raise argparse.ArgumentTypeError("ports must be 1-65535: " + text)
    return values


class BorderHttp(object):
    def request(self, args):
        return ("GET /{} HTTP/1.1\r\n"
                "Host: {}\r\n"
                "User-Agent: trex-border\r\n"
                "Accept: */*\r\n"
                "\r\n").format(args.path, args.vip)

    def response(self, args):
        head = ("HTTP/1.1 200 OK\r\n"
                "Server: trex-border\r\n"
                "Content-Type: text/plain\r\n"
                "Content-Length: {}\r\n"
                "\r\n").format(args.body)
        return head + "b" * args.body

    def client_program(self, req, resp, requests):
        prog = ASTFProgram()
        prog.set_var("left", requests)
        prog.set_label("next:")
        prog.send(req)
        prog.recv(len(resp), clear=True)
        prog.jmp_nz("left", "next:")
        return prog  # the client closes when its program ends

    def server_program(self, req, resp, requests, proxy_header_len):
        prog = ASTFProgram()
        # The first request arrives behind border's PROXY header.
        prog.recv(proxy_header_len + len(req), clear=True)
        prog.send(resp)
        if requests > 1:
            prog.set_var("left", requests - 1)
            prog.set_label("next:")
            prog.recv(len(req), clear=True)
            prog.send(resp)
            prog.jmp_nz("left", "next:")
        prog.wait_for_peer_close()
        return prog

    def create_profile(self, args):
        req = self.request(args)
        resp = self.response(args)

        clients = ASTFIPGenDist(ip_range=[args.client_min, args.client_max],
                                distribution="rand")
        # The one "server" the clients see is the VIP.
        vip = ASTFIPGenDist(ip_range=[args.vip, args.vip], distribution="seq")
        # No offset on the server side: a second port pair targets the same VIP.
        ip_gen = ASTFIPGen(glob=ASTFIPGenGlobal(ip_offset="1.0.0.0",
                                                ip_offset_server="0.0.0.0"),
                           dist_client=clients,
                           dist_server=vip)

        client_prog = self.client_program(req, resp, args.requests)
        server_prog = self.server_program(req, resp, args.requests, args.proxy_header_len)
        # One server per backend port, any address; a template needs a client
        # side too, so each gets its share of the rate. Which server a
        # connection reaches is border's (Maglev's) choice, not the template's.
        templates = []
        for port in args.backend_ports:
            client = ASTFTCPClientTemplate(program=client_prog, ip_gen=ip_gen,
                                           port=args.vip_port,
                                           cps=args.cps / len(args.backend_ports))
            server = ASTFTCPServerTemplate(program=server_prog,
                                           assoc=ASTFAssociationRule(port=port))
            templates.append(ASTFTemplate(client_template=client, server_template=server))
        return ASTFProfile(default_ip_gen=ip_gen, templates=templates)

    def get_profile(self, tunables=(), **kwargs):
        parser = argparse.ArgumentParser(
            description="Argparser for {}".format(os.path.basename(__file__)),
            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        parser.add_argument("--vip", default="10.10.0.100", help="VIP address")
        parser.add_argument("--vip-port", type=int, default=80, help="VIP port")
        parser.add_argument("--backend-ports", type=ports, default=[8080],
                            help="comma-separated ports the backends (TRex's server side) listen on")
        parser.add_argument("--client-min", default="16.0.0.1", help="lowest client address")
        parser.add_argument("--client-max", default="16.0.255.254", help="highest client address")
        parser.add_argument("--cps", type=float, default=1000,
                            help="new connections per second (start -m multiplies it)")
        parser.add_argument("--requests", type=int, default=1,
                            help="requests per connection (keep-alive)")
        parser.add_argument("--path", default="index.html", help="requested path")
        parser.add_argument("--body", type=int, default=1024, help="response body bytes")
        parser.add_argument("--proxy-header-len", type=int, default=28,
                            help="bytes of PROXY header border inserts (0: proxy_protocol = none)")
        args = parser.parse_args(list(tunables))
        if args.requests < 1:
            parser.error("--requests must be at least 1")
        return self.create_profile(args)


def register():
    return BorderHttp()
