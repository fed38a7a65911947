-- pktgen-dpdk: UDP flood toward a border VIP from a range of clients.
--
-- Every packet comes from the next client address and source port of the
-- range, so border sees a new flow per packet. pktgen's per-packet random
-- bits (pktgen.rnd) are written after the checksums and would leave a bad
-- IPv4 header checksum, which border drops (drop_ipv4_bad_checksum): the
-- range walk builds each packet whole. The example config's VIP is TCP
-- only, so against it this measures the drop path (drop_vip_unhandled);
-- add a `protocol = "udp"` VIP and set vip_port to measure forwarding.
--
--   pktgen -l 0-2 -n 4 -- -P -m "[1:2].0" -f perf/profiles/pktgen/udp_flood.lua

package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

-- Edit these for your setup.
local port       = "0"                   -- pktgen port cabled to border's "ext" port
local border_mac = "00:00:00:00:00:00"   -- MAC of border's "ext" port (border-dp prints it)
local vip        = "10.10.0.100"         -- [[vip]] address
local vip_port   = 80                    -- [[vip]] port (a UDP VIP to forward)
local client_min = "16.0.0.1"            -- client addresses walked in order
local client_max = "16.0.255.254"
local sport_min  = 1024                  -- client ports walked in order
local sport_max  = 65535
local size       = 64                    -- frame size in bytes, FCS included
local rate       = 100                   -- percent of line rate
local seconds    = 60                    -- how long to send

if border_mac == "00:00:00:00:00:00" then
    error("udp_flood.lua: set border_mac to the MAC of border's ext port")
end

pktgen.stop(port)
pktgen.range.dst_mac(port, "start", border_mac)

pktgen.range.dst_ip(port, "start", vip)
pktgen.range.dst_ip(port, "inc", "0.0.0.0")
pktgen.range.dst_ip(port, "min", vip)
pktgen.range.dst_ip(port, "max", vip)

pktgen.range.src_ip(port, "start", client_min)
pktgen.range.src_ip(port, "inc", "0.0.0.1")
pktgen.range.src_ip(port, "min", client_min)
pktgen.range.src_ip(port, "max", client_max)

pktgen.range.ip_proto(port, "udp")

pktgen.range.dst_port(port, "start", vip_port)
pktgen.range.dst_port(port, "inc", 0)
pktgen.range.dst_port(port, "min", vip_port)
pktgen.range.dst_port(port, "max", vip_port)

pktgen.range.src_port(port, "start", sport_min)
pktgen.range.src_port(port, "inc", 1)
pktgen.range.src_port(port, "min", sport_min)
pktgen.range.src_port(port, "max", sport_max)

pktgen.range.pkt_size(port, "start", size)
pktgen.range.pkt_size(port, "inc", 0)
pktgen.range.pkt_size(port, "min", size)
pktgen.range.pkt_size(port, "max", size)

pktgen.set(port, "rate", rate)
pktgen.set(port, "count", 0)             -- 0: until stopped
pktgen.set_range(port, "on")

printf("udp_flood: %s:%d from %s-%s at %d%% for %ds\n", vip, vip_port, client_min, client_max, rate, seconds)
pktgen.start(port)
pktgen.sleep(seconds)
pktgen.stop(port)
