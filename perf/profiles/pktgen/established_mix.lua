-- pktgen-dpdk: established TCP connections toward a border VIP.
--
-- border keeps per-flow state and, on a full-NAT VIP (the example config's),
-- drops a mid-stream segment of a connection it never saw a SYN for
-- (drop_no_conntrack). So every flow is a whole connection, in order:
--
--   SYN  ->  data (PSH+ACK)  ->  FIN+ACK
--
-- pktgen sends one packet template per port, so the script runs the phases
-- one after another over the same clients: all SYNs, then all data
-- segments, then all FINs, each phase restarting the client range at its
-- first address and port so packet i of every phase is connection i
-- (clients x ports connections per round, all different tuples). Then
-- the next round reuses the tuples (border sees a SYN on the closing entry
-- and picks afresh). The clients are walked in order, not drawn at random:
-- pktgen's random bits would differ between the phases of one connection.
--
-- pktgen's TCP segments always carry its fill pattern (6 bytes in a 64-byte
-- frame), so there is no bare ACK phase: the handshake's ACK rides on the
-- data segment. On a PROXY-protocol VIP the SYN's fill is stripped
-- (pp_syn_data_stripped: the fill of a SYN would precede the header) and
-- the data segment carries the header (pp_headers_inserted). TRex's
-- stl_established_mix.py sends bare SYNs and ACKs.
--
--   pktgen -l 0-2 -n 4 -- -P -m "[1:2].0" -f perf/profiles/pktgen/established_mix.lua

package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

-- Edit these for your setup.
local port       = "0"                   -- pktgen port cabled to border's "ext" port
local border_mac = "00:00:00:00:00:00"   -- MAC of border's "ext" port (border-dp prints it)
local vip        = "10.10.0.100"         -- [[vip]] address
local vip_port   = 80                    -- [[vip]] port
local client_min = "16.0.0.1"            -- first client address of the range
local clients    = 101                   -- client addresses from client_min on
local sport_min  = 1024                  -- first client port of the range
local ports      = 100                   -- source ports per address (coprime with clients)
local rounds     = 100                   -- rounds to send
local isn        = 1000                  -- client initial sequence number
local data_size  = 128                   -- frame size of the data segment, FCS included
local rate       = 10                    -- percent of line rate

if border_mac == "00:00:00:00:00:00" then
    error("established_mix.lua: set border_mac to the MAC of border's ext port")
end
local function gcd(a, b)
    while b ~= 0 do a, b = b, a % b end
    return a
end
-- pktgen steps the address and the port together, each wrapping at its
-- own max: with coprime counts the first clients x ports packets are all
-- different tuples (Chinese remainder theorem), so a phase never repeats one.
if clients < 1 or ports < 1 or sport_min + ports - 1 > 65535 or gcd(clients, ports) ~= 1 then
    error("established_mix.lua: clients and ports must be coprime, ports at most 65536 - sport_min")
end
local flows = clients * ports
local sport_max = sport_min + ports - 1
local function ipv4_add(addr, n)
    local a, b, c, d = addr:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    local v = ((tonumber(a) * 256 + tonumber(b)) * 256 + tonumber(c)) * 256 + tonumber(d) + n
    return string.format("%d.%d.%d.%d", v // 16777216 % 256, v // 65536 % 256, v // 256 % 256, v % 256)
end
local client_max = ipv4_add(client_min, clients - 1)

-- The three phases: TCP flags, sequence number, frame size. The fill
-- pattern's length is the frame size minus 58 bytes (Ethernet, IPv4 and TCP
-- headers, FCS).
local fill = data_size - 58
local phases = {
    { name = "syn",  flags = "syn",     seq = isn,            size = 64 },
    { name = "data", flags = "ack,psh", seq = isn + 1,        size = data_size },
    { name = "fin",  flags = "ack,fin", seq = isn + 1 + fill, size = 64 },
}

-- Runs pktgen CLI commands: the Lua API has no setter for a range's TCP
-- flags or sequence numbers, the CLI does ("range <port> tcp flags ...").
local function cli(...)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(table.concat({ ... }, "\n"), "\n")
    f:close()
    pktgen.load(path)
    os.remove(path)
end

local function set_fixed(setter, value)
    setter(port, "start", value)
    setter(port, "min", value)
    setter(port, "max", value)
end

local function setup()
    pktgen.stop(port)
    pktgen.range.dst_mac(port, "start", border_mac)
    set_fixed(pktgen.range.dst_ip, vip)
    pktgen.range.dst_ip(port, "inc", "0.0.0.0")
    pktgen.range.src_ip(port, "min", client_min)
    pktgen.range.src_ip(port, "max", client_max)
    pktgen.range.src_ip(port, "inc", "0.0.0.1")
    pktgen.range.ip_proto(port, "tcp")
    set_fixed(pktgen.range.dst_port, vip_port)
    pktgen.range.dst_port(port, "inc", 0)
    pktgen.range.src_port(port, "min", sport_min)
    pktgen.range.src_port(port, "max", sport_max)
    pktgen.range.src_port(port, "inc", 1)
    pktgen.range.pkt_size(port, "inc", 0)
    pktgen.set(port, "rate", rate)
    pktgen.set_range(port, "on")
end

-- Sends one phase: `flows` packets from the first client tuple on, then
-- waits for the port to finish.
local function send_phase(phase)
    pktgen.range.src_ip(port, "start", client_min)
    pktgen.range.src_port(port, "start", sport_min)
    set_fixed(pktgen.range.pkt_size, phase.size)
    cli(string.format("range %s tcp flags %s", port, phase.flags),
        string.format("range %s tcp seq %d %d %d 0", port, phase.seq, phase.seq, phase.seq),
        string.format("range %s tcp ack 1 1 1 0", port))
    pktgen.set(port, "count", flows)
    pktgen.start(port)
    pktgen.delay(10)
    while pktgen.isSending(port)[tonumber(port)] == "y" do
        pktgen.delay(10)
    end
end

setup()
printf("established_mix: %d connections x %d rounds to %s:%d from %s-%s ports %d-%d\n",
    flows, rounds, vip, vip_port, client_min, client_max, sport_min, sport_max)
for round = 1, rounds do
    for _, phase in ipairs(phases) do
        send_phase(phase)
    end
    if round % 10 == 0 then
        printf("established_mix: round %d/%d done\n", round, rounds)
    end
end
pktgen.stop(port)
