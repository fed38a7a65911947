//! The tables region: round trip from config, incremental publication,
//! QSBR reclamation, bounded arena, re-attach after a crash, version checks
//! and a concurrent reader.

mod tables {
    use std::net::IpAddr;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use conf::tables::*;
    use conf::{Config, Mode};

    /// A fresh path under the temp dir, removed on drop.
    struct TmpPath(PathBuf);

    impl TmpPath {
        fn new(name: &str) -> Self {
            let p = std::env::temp_dir()
                .join(format!("border-tables-test-{}-{name}", std::process::id()));
            let _ = std::fs::remove_file(&p);
            TmpPath(p)
        }
    }

    impl Drop for TmpPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    const CONFIG: &str = r#"instance = "t"
zone = "a"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "net_tap0,iface=b-ext"
addresses = ["10.10.0.1/24", "2001:db8:10::1/64"]
[[port]]
name = "int"
devargs = "net_tap1,iface=b-int"
addresses = ["10.20.0.1/24", "2001:db8:20::1/64"]
local_addresses = ["10.20.0.1"]
[mgmt]
listen = "unix:///run/border/t.sock"
[[vip]]
name = "web"
address = "10.10.0.100"
port = 80
proxy_protocol = "v2"
proxy_protocol_tlvs = ["unique_id", "crc32c"]
proxy_protocol_max_len = 100
maglev_table_size = 1021
zone_affinity = true
[[vip.backend]]
address = "10.20.0.11"
port = 8080
zone = "a"
[[vip.backend]]
address = "10.20.0.12"
port = 8080
zone = "a"
[[vip.backend]]
address = "10.20.0.13"
port = 8080
zone = "b"
[[vip.backend]]
address = "10.20.0.14"
port = 8080
weight = 2
zone = "b"
[[vip]]
name = "dns6"
address = "2001:db8:10::53"
port = 53
protocol = "udp"
mode = "dnat"
maglev_table_size = 307
[[vip.backend]]
address = "2001:db8:20::11"
port = 53
[[vip.backend]]
address = "2001:db8:20::12"
port = 53
weight = 3
[[vip.backend]]
address = "2001:db8:20::13"
port = 53
[[vip]]
name = "none"
address = "10.10.0.101"
port = 443
maglev_table_size = 2
"#;

    fn config() -> Config {
        Config::from_toml_str(CONFIG, "t.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    /// A config with `n` VIPs of `b` backends each, ring size `m`.
    fn big_config(n: usize, b: usize, m: u32) -> Config {
        let mut t = String::from(
            "instance = \"t\"\n[dataplane]\nworker_lcores = [1]\n\
             flow_hash_key = \"00112233445566778899aabbccddeeff\"\n\
             [[port]]\nname = \"ext\"\ndevargs = \"net_null0\"\naddresses = [\"10.0.0.1/8\"]\n\
             local_addresses = [\"10.0.0.1\"]\n[mgmt]\nlisten = \"unix:///run/border/t.sock\"\n",
        );
        for v in 0..n {
            t += &format!(
                "[[vip]]\nname = \"v{v}\"\naddress = \"10.1.{}.{}\"\nport = 80\nmaglev_table_size = {m}\n",
                v / 250,
                v % 250 + 1
            );
            for i in 0..b {
                t += &format!(
                    "[[vip.backend]]\naddress = \"10.2.{}.{}\"\nport = {}\n",
                    i / 250,
                    i % 250 + 1,
                    8000 + v
                );
            }
        }
        Config::from_toml_str(&t, "big.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    /// Expected VIP block length (the documented layout).
    fn vip_block_len(v: &VipTable) -> u64 {
        let name_end = VIP_FIXED_END + v.name.len() as u64;
        let backends = name_end.div_ceil(8) * 8;
        let prefixes = (v.limits.allow.len() + v.limits.deny.len()) as u64;
        let limits = 32 + 24 * prefixes;
        (backends + 32 * v.backends.len() as u64 + limits + 4 * v.ring.len() as u64).div_ceil(8) * 8
    }

    fn root_len(n: usize) -> u64 {
        64 + 32 * n as u64
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Limits the reader would refuse are refused by the writer, before
    /// anything is written; good ones come back as they went in.
    #[test]
    fn limits_round_trip_and_bad_ones_are_refused_before_writing() {
        let path = TmpPath::new("limits");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        let mut g = stamped(1, 61);
        let v = Arc::make_mut(&mut g.vips[0]);
        v.limits.max_connections = 7;
        v.limits.per_source_per_second = 3;
        v.limits.deny = vec!["10.9.0.0/16".parse().unwrap()];
        v.limits.allow = vec!["10.0.0.0/8".parse().unwrap()];
        v.backends[2].max_connections = 5;
        w.publish(&g, &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        let view = r.view_current().unwrap();
        assert_eq!(view.to_generation(), g);
        let vv = view.vip(0).unwrap();
        assert_eq!(vv.limits().max_connections, 7);
        assert_eq!(vv.prefixes().len(), 2);
        assert_eq!(vv.backends()[2].max_connections, 5);

        for (what, bad) in [
            ("wrong family", {
                let mut b = g.clone();
                Arc::make_mut(&mut b.vips[0]).limits.deny = vec!["2001:db8::/32".parse().unwrap()];
                b
            }),
            ("table not a power of two", {
                let mut b = g.clone();
                Arc::make_mut(&mut b.vips[0]).limits.source_table_size = 1000;
                b
            }),
            ("prefix length 0", {
                let mut b = g.clone();
                Arc::make_mut(&mut b.vips[0]).limits.source_prefix_v4 = 0;
                b
            }),
        ] {
            let e = w.publish(&bad, &[1]).unwrap_err();
            assert!(
                matches!(e, TablesError::InvalidGeneration(_)),
                "{what}: {e}"
            );
            assert_eq!(w.published_generation(), 1, "{what}");
        }
    }

    /// A DSR VIP's encapsulation travels in the record's mode byte and
    /// comes back as written, for each of the three.
    #[test]
    fn dsr_modes_round_trip() {
        let mut text = CONFIG.to_string();
        for (i, encap) in ["none", "ipip", "gue"].iter().enumerate() {
            text += &format!(
                "[[vip]]\nname = \"dsr-{encap}\"\naddress = \"10.10.0.{}\"\nport = 80\nmode = \"dsr\"\nencap = \"{encap}\"\nmaglev_table_size = 211\n[[vip.backend]]\naddress = \"10.20.0.11\"\nport = 80\n",
                200 + i
            );
        }
        let cfg = Config::from_toml_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let gen = build_generation(&cfg, &|_, _| None).unwrap();
        let path = TmpPath::new("dsr-modes");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        w.publish(&gen, &[]).unwrap();
        let view = r.view(r.current()).unwrap();
        let n = gen.vips.len();
        let modes: Vec<Mode> = (n - 3..n).map(|i| view.vip(i).unwrap().mode()).collect();
        assert_eq!(
            modes,
            [
                Mode::Dsr(conf::Encap::None),
                Mode::Dsr(conf::Encap::Ipip),
                Mode::Dsr(conf::Encap::Gue)
            ]
        );
        assert_eq!(view.to_generation(), gen);
    }

    #[test]
    fn round_trip_from_config() {
        let cfg = config();
        // web: backend 0 down, 1 draining -> ring over 2 and 3 (zone b:
        // zone a has nothing eligible, so affinity falls back to all zones).
        // dns6: backend 2 gets weight 0.
        let ov = |v: usize, b: usize| match (v, b) {
            (0, 0) => Some((1, BackendState::Down)),
            (0, 1) => Some((1, BackendState::Draining)),
            (1, 2) => Some((0, BackendState::Up)),
            _ => None,
        };
        let gen = build_generation(&cfg, &ov).unwrap();
        assert_eq!(gen.vips.len(), 3);
        let web = &gen.vips[0];
        assert_eq!(
            (web.id, web.name.as_str(), web.addr, web.port),
            (0, "web", ip("10.10.0.100"), 80)
        );
        assert_eq!(
            (web.proto, web.mode, web.pp_max_len),
            (PROTO_TCP, Mode::FullNat, 100)
        );
        assert_eq!(
            web.flags,
            VipFlags::PROXY_V2
                | VipFlags::PP_TLV_UNIQUE_ID
                | VipFlags::PP_TLV_CRC32C
                | VipFlags::ZONE_AFFINITY
        );
        assert_eq!(web.backends.len(), 4);
        assert_eq!(web.backends[0].state, BackendState::Down);
        assert_eq!(web.backends[1].state, BackendState::Draining);
        assert_eq!(web.ring.len(), 1021);
        // Only backends 2 and 3 (weights 1 and 2) are in the ring.
        let count = |r: &[u32], i: u32| r.iter().filter(|&&e| e == i).count();
        assert_eq!(count(&web.ring, 0) + count(&web.ring, 1), 0);
        assert_eq!(count(&web.ring, 2), 340);
        assert_eq!(count(&web.ring, 3), 681);
        let dns = &gen.vips[1];
        assert_eq!(
            (dns.proto, dns.mode, dns.addr),
            (PROTO_UDP, Mode::Dnat, ip("2001:db8:10::53"))
        );
        assert_eq!(count(&dns.ring, 2), 0);
        assert_eq!(count(&dns.ring, 1), 230);
        assert!(gen.vips[2].backends.is_empty() && gen.vips[2].ring.is_empty());
        assert_eq!(gen.flow_hash_key, cfg.dataplane.flow_hash_key);

        let path = TmpPath::new("round-trip");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        assert_eq!(r.current(), Published::NONE);
        assert!(matches!(
            r.view_current(),
            Err(TablesError::NothingPublished)
        ));
        let st = w.publish(&gen, &[]).unwrap();
        assert_eq!(st.generation, 1);
        assert_eq!(st.blocks_written, 4);
        assert_eq!(
            st.bytes_written,
            gen.vips.iter().map(|v| vip_block_len(v)).sum::<u64>() + root_len(3)
        );
        let p = r.current();
        assert_eq!(p.generation, 1);
        assert_eq!(p, w.published());
        let view = r.view(p).unwrap();
        assert_eq!(view.generation(), 1);
        assert_eq!(view.to_generation(), gen);
        assert_eq!(view.flow_hash_key(), cfg.dataplane.flow_hash_key);
        assert_eq!(view.vip_count(), 3);
        let v6 = view.vip(1).unwrap();
        assert_eq!(
            (v6.name(), v6.addr(), v6.port(), v6.proto()),
            ("dns6", ip("2001:db8:10::53"), 53, 17)
        );
        assert_eq!(v6.mode(), Mode::Dnat);
        assert_eq!(v6.backends()[1].ip(), ip("2001:db8:20::12"));
        assert_eq!(v6.backends()[1].family, 6);
        assert_eq!(view.backends(0).unwrap()[3].weight, 2);
        assert_eq!(view.backends(0).unwrap()[3].addr[..4], [10, 20, 0, 14]);
        assert_eq!(view.ring(0).unwrap(), &web.ring[..]);
        assert!(view.vip(3).is_none() && view.ring(3).is_none());
        // pick() follows ring[hash % M].
        let h = view
            .flow_hasher()
            .hash_v4([1, 2, 3, 4], [10, 10, 0, 100], 5555, 80, 6);
        let (i, b) = view.vip(0).unwrap().pick(h).unwrap();
        assert_eq!(i, web.ring[(h % 1021) as usize]);
        assert_eq!(b.backend_state(), BackendState::Up);
        assert!(view.vip(2).unwrap().pick(h).is_none());
        // Ids are stable per (vip, addr, port), unique per VIP.
        let again = build_generation(&cfg, &no_overrides).unwrap();
        for (a, b) in gen.vips.iter().zip(&again.vips) {
            let ids: Vec<u32> = a.backends.iter().map(|b| b.id).collect();
            assert_eq!(ids, b.backends.iter().map(|b| b.id).collect::<Vec<_>>());
            let mut u = ids.clone();
            u.sort();
            u.dedup();
            assert_eq!(u.len(), ids.len());
        }
    }

    #[test]
    fn fail_open_and_zone_affinity() {
        let cfg = config();
        // Every web backend up: zone affinity keeps zone "a" (0 and 1).
        let gen = build_generation(&cfg, &no_overrides).unwrap();
        let web = &gen.vips[0];
        assert!(web.flags.contains(VipFlags::ZONE_LOCAL));
        assert!(web.ring.iter().all(|&e| e < 2));
        // Every backend down: fail open over all of them, weights honoured.
        let down = |_: usize, _: usize| Some((1, BackendState::Down));
        let down_gen = build_generation(&cfg, &down).unwrap();
        for v in &down_gen.vips[..2] {
            assert!(v.flags.contains(VipFlags::FAIL_OPEN), "{}", v.name);
            assert!(!v.flags.contains(VipFlags::ZONE_LOCAL));
            let mut seen: Vec<u32> = v.ring.clone();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), v.backends.len());
        }
        // Every backend drained by the operator: drained means drained, the
        // ring is empty and the VIP is not "fail open".
        let zero = |_: usize, _: usize| Some((0, BackendState::Draining));
        let gen = build_generation(&cfg, &zero).unwrap();
        let dns = &gen.vips[1];
        assert!(!dns.flags.contains(VipFlags::FAIL_OPEN));
        assert!(dns.ring.is_empty());
        // Some down, the rest drained: fail open over the down ones only.
        let mixed = |_: usize, b: usize| {
            Some(if b == 0 {
                (1, BackendState::Down)
            } else {
                (1, BackendState::Draining)
            })
        };
        let gen = build_generation(&cfg, &mixed).unwrap();
        let dns = &gen.vips[1];
        assert!(dns.flags.contains(VipFlags::FAIL_OPEN));
        assert!(!dns.ring.is_empty() && dns.ring.iter().all(|&e| e == 0));
        // Killed by the operator: out of the ring like a drain, and never
        // back through fail-open either.
        let killed = |_: usize, b: usize| {
            Some(if b == 0 {
                (1, BackendState::Down)
            } else {
                (1, BackendState::Killed)
            })
        };
        let gen = build_generation(&cfg, &killed).unwrap();
        let dns = &gen.vips[1];
        assert_eq!(dns.backends[1].state, BackendState::Killed);
        assert!(dns.flags.contains(VipFlags::FAIL_OPEN));
        assert!(!dns.ring.is_empty() && dns.ring.iter().all(|&e| e == 0));
        let all_killed = |_: usize, _: usize| Some((1, BackendState::Killed));
        let gen = build_generation(&cfg, &all_killed).unwrap();
        assert!(!gen.vips[1].flags.contains(VipFlags::FAIL_OPEN));
        assert!(gen.vips[1].ring.is_empty());
        // The VIP without backends is not "fail open", just empty.
        assert!(!down_gen.vips[2].flags.contains(VipFlags::FAIL_OPEN));
        // The reader sees the flag.
        let gen = down_gen;
        let path = TmpPath::new("fail-open");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        w.publish(&gen, &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        let v = r.view_current().unwrap();
        assert!(v.vip(1).unwrap().fail_open());
        assert!(!v.vip(2).unwrap().fail_open());
    }

    /// `on_down = "reset"` becomes the VIP's RESET_ON_DOWN bit, and
    /// readers see it; a VIP without it does not get it.
    #[test]
    fn reset_on_down_flag() {
        let text = CONFIG.replacen(
            "zone_affinity = true\n",
            "zone_affinity = true\n[vip.health]\nkind = \"tcp\"\non_down = \"reset\"\n",
            1,
        );
        let cfg = Config::from_toml_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let gen = build_generation(&cfg, &no_overrides).unwrap();
        assert!(gen.vips[0].flags.contains(VipFlags::RESET_ON_DOWN));
        assert!(!gen.vips[1].flags.contains(VipFlags::RESET_ON_DOWN));
        let path = TmpPath::new("reset-on-down");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        w.publish(&gen, &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        let v = r.view_current().unwrap();
        assert!(v.vip(0).unwrap().flags().contains(VipFlags::RESET_ON_DOWN));
        assert!(!v.vip(1).unwrap().flags().contains(VipFlags::RESET_ON_DOWN));
        assert_eq!(v.vip(0).unwrap().to_table(), *gen.vips[0]);
    }

    /// `hash = "source"` becomes the VIP's HASH_SOURCE bit, which readers
    /// see; the default 5-tuple hash sets no bit.
    #[test]
    fn hash_source_flag() {
        let text = CONFIG.replacen(
            "zone_affinity = true\n",
            "zone_affinity = true\nhash = \"source\"\n",
            1,
        );
        let cfg = Config::from_toml_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let gen = GenerationBuilder::new().build(&cfg, &no_overrides).unwrap();
        assert!(gen.vips[0].flags.contains(VipFlags::HASH_SOURCE));
        assert!(!gen.vips[1].flags.contains(VipFlags::HASH_SOURCE));
        let path = TmpPath::new("hash-source");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        w.publish(&gen, &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        let v = r.view_current().unwrap();
        assert!(v.vip(0).unwrap().flags().contains(VipFlags::HASH_SOURCE));
        assert!(!v.vip(1).unwrap().flags().contains(VipFlags::HASH_SOURCE));
    }

    /// `syn_proxy` becomes the VIP's SYN_PROXY_* bit, readers see it, and a
    /// change of it alone is a new block for that VIP only (applied without
    /// a restart).
    #[test]
    fn syn_proxy_flags() {
        let text = CONFIG.replacen(
            "zone_affinity = true\n",
            "zone_affinity = true\nsyn_proxy = \"always\"\n",
            1,
        );
        let cfg = Config::from_toml_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let mut b = GenerationBuilder::new();
        let gen = b.build(&cfg, &no_overrides).unwrap();
        assert!(gen.vips[0].flags.contains(VipFlags::SYN_PROXY_ALWAYS));
        assert!(!gen.vips[0].flags.contains(VipFlags::SYN_PROXY_AUTO));
        assert!(!gen.vips[1].flags.contains(VipFlags::SYN_PROXY_ALWAYS));
        let path = TmpPath::new("syn-proxy");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        w.publish(&gen, &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        let v = r.view_current().unwrap();
        assert!(v
            .vip(0)
            .unwrap()
            .flags()
            .contains(VipFlags::SYN_PROXY_ALWAYS));
        assert_eq!(v.vip(0).unwrap().to_table(), *gen.vips[0]);
        let auto = text.replacen("syn_proxy = \"always\"", "syn_proxy = \"auto\"", 1);
        let cfg2 = Config::from_toml_str(&auto, "t.toml").unwrap();
        let gen2 = b.build(&cfg2, &no_overrides).unwrap();
        assert!(gen2.vips[0].flags.contains(VipFlags::SYN_PROXY_AUTO));
        assert!(!Arc::ptr_eq(&gen.vips[0], &gen2.vips[0]));
        assert!(Arc::ptr_eq(&gen.vips[1], &gen2.vips[1]));
    }

    /// `persistence_timeout` reaches readers in seconds, its change is a
    /// new block for that VIP only (the ring kept), and a reader refuses a
    /// block whose value is beyond the config's bound.
    #[test]
    fn persistence_timeout_in_the_vip_record() {
        let text = CONFIG.replacen(
            "zone_affinity = true\n",
            "zone_affinity = true\npersistence_timeout = \"5m\"\n",
            1,
        );
        let cfg = Config::from_toml_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        let mut b = GenerationBuilder::new();
        let gen = b.build(&cfg, &no_overrides).unwrap();
        assert_eq!(
            (gen.vips[0].persistence_s, gen.vips[1].persistence_s),
            (300, 0)
        );
        let path = TmpPath::new("persistence");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        w.publish(&gen, &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        let v = r.view_current().unwrap();
        assert_eq!(v.vip(0).unwrap().persistence_s(), 300);
        assert_eq!(v.vip(1).unwrap().persistence_s(), 0);
        assert_eq!(v.vip(0).unwrap().to_table(), *gen.vips[0]);
        let longer = text.replacen("\"5m\"", "900", 1);
        let cfg2 = Config::from_toml_str(&longer, "t.toml").unwrap();
        let gen2 = b.build(&cfg2, &no_overrides).unwrap();
        assert_eq!(gen2.vips[0].persistence_s, 900);
        assert_eq!(gen2.vips[0].ring, gen.vips[0].ring);
        assert!(!Arc::ptr_eq(&gen.vips[0], &gen2.vips[0]));
        assert!(Arc::ptr_eq(&gen.vips[1], &gen2.vips[1]));
        // A writer refuses what a reader would.
        let mut bad = gen.clone();
        Arc::make_mut(&mut bad.vips[0]).persistence_s = MAX_PERSISTENCE_S + 1;
        let path2 = TmpPath::new("persistence-bad");
        let mut w2 = TablesWriter::create(&path2.0, 1 << 20).unwrap();
        let err = w2.publish(&bad, &[]).unwrap_err().to_string();
        assert!(err.contains("persistence"), "{err}");
    }

    #[test]
    fn builder_reuses_unchanged_vips() {
        let cfg = big_config(20, 8, 1021);
        let mut b = GenerationBuilder::new();
        let g1 = b.build(&cfg, &no_overrides).unwrap();
        let g2 = b.build(&cfg, &no_overrides).unwrap();
        assert!(g1.vips.iter().zip(&g2.vips).all(|(a, b)| Arc::ptr_eq(a, b)));
        let down = |v: usize, i: usize| (v == 7 && i == 3).then_some((1, BackendState::Down));
        let g3 = b.build(&cfg, &down).unwrap();
        for (i, (a, c)) in g1.vips.iter().zip(&g3.vips).enumerate() {
            assert_eq!(Arc::ptr_eq(a, c), i != 7, "vip {i}");
        }
        // Same result as a from-scratch build.
        assert_eq!(g3, build_generation(&cfg, &down).unwrap());
        // A down backend's weight change keeps the ring (no Maglev) but is a
        // new VIP table.
        let down2 = |v: usize, i: usize| (v == 7 && i == 3).then_some((5, BackendState::Down));
        let g4 = b.build(&cfg, &down2).unwrap();
        assert!(!Arc::ptr_eq(&g3.vips[7], &g4.vips[7]));
        assert_eq!(g3.vips[7].ring, g4.vips[7].ring);
        assert_eq!(g4.vips[7].backends[3].weight, 5);
    }

    #[test]
    fn one_backend_change_writes_only_that_vip() {
        let n = 40;
        let cfg = big_config(n, 16, 1999);
        let mut b = GenerationBuilder::new();
        let g1 = b.build(&cfg, &no_overrides).unwrap();
        let path = TmpPath::new("one-backend");
        let mut w = TablesWriter::create(&path.0, 4 << 20).unwrap();
        let s1 = w.publish(&g1, &[]).unwrap();
        assert_eq!(s1.blocks_written as usize, n + 1);
        assert_eq!(s1.blocks_reused, 0);

        let r = TablesReader::open(&path.0).unwrap();
        let v1 = r.view_current().unwrap();
        assert_eq!(v1.validation().blocks_hashed as usize, n + 1);
        assert_eq!(v1.validation().blocks_cached, 0);
        let offsets1: Vec<u64> = v1.vips().iter().map(|v| v.block_offset()).collect();

        let down = |v: usize, i: usize| (v == 17 && i == 5).then_some((1, BackendState::Down));
        let g2 = b.build(&cfg, &down).unwrap();
        let s2 = w.publish(&g2, &[1]).unwrap();
        assert_eq!(s2.generation, 2);
        assert_eq!(s2.blocks_written, 2, "{s2:?}");
        assert_eq!(s2.bytes_written, vip_block_len(&g2.vips[17]) + root_len(n));
        assert_eq!(s2.blocks_reused as usize, n - 1);
        assert_eq!(s2.reused_by_pointer as usize, n - 1);
        // The old VIP 17 block and the old root are retired, not yet freed.
        assert_eq!(s2.blocks_pending, 2);

        // The worker adopting generation 2 re-hashes only the root and VIP 17.
        let v2 = r.view_current().unwrap();
        assert_eq!(v2.generation(), 2);
        assert_eq!(v2.validation().blocks_hashed, 2);
        assert_eq!(v2.validation().blocks_cached as usize, n - 1);
        assert_eq!(
            v2.validation().bytes_hashed,
            vip_block_len(&g2.vips[17]) - 8 + root_len(n) - 8
        );
        for (i, v) in v2.vips().iter().enumerate() {
            assert_eq!(v.block_offset() == offsets1[i], i != 17, "vip {i}");
        }
        assert_eq!(v2.to_generation(), g2);
        // A full validation agrees.
        assert_eq!(
            r.view_uncached(v2.published())
                .unwrap()
                .validation()
                .blocks_hashed as usize,
            n + 1
        );

        // Identical content in new allocations (a from-scratch build): the
        // writer compares bytes and still writes only the root.
        let g3 = build_generation(&cfg, &down).unwrap();
        let s3 = w.publish(&g3, &[2]).unwrap();
        assert_eq!(
            (s3.blocks_written, s3.blocks_reused, s3.reused_by_pointer),
            (1, n as u32, 0)
        );
        assert_eq!(s3.bytes_written, root_len(n));
        // Generation 1's retired blocks are reclaimed now that the reader is at 2.
        assert_eq!(s3.blocks_reclaimed, 2);
        // And the next publish of the same Arcs is recognised by pointer.
        let s4 = w.publish(&g3, &[3]).unwrap();
        assert_eq!((s4.blocks_written, s4.reused_by_pointer), (1, n as u32));
    }

    #[test]
    fn reordered_added_and_removed_vips_keep_their_blocks() {
        let cfg = big_config(10, 4, 401);
        let g1 = build_generation(&cfg, &no_overrides).unwrap();
        let path = TmpPath::new("reorder");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        w.publish(&g1, &[]).unwrap();
        let v1 = r.view_current().unwrap();
        let off: Vec<u64> = v1.vips().iter().map(|v| v.block_offset()).collect();
        drop(v1);

        // Reverse the order, drop VIP 3, add a new VIP with id 99.
        let mut g2 = g1.clone();
        g2.vips.remove(3);
        g2.vips.reverse();
        let mut extra = (*g1.vips[0]).clone();
        extra.id = 99;
        extra.name = "extra".into();
        g2.vips.push(Arc::new(extra));
        let s = w.publish(&g2, &[1]).unwrap();
        assert_eq!((s.blocks_written, s.reused_by_pointer), (2, 9), "{s:?}");
        // The old root and VIP 3's block are retired.
        assert_eq!(s.blocks_pending, 2);
        let v2 = r.view_current().unwrap();
        assert_eq!(v2.to_generation(), g2);
        // Root, the new VIP, and the first VIP out of place (the reader
        // looks blocks up by offset only from the second positional miss).
        assert_eq!(v2.validation().blocks_hashed, 3);
        assert_eq!(v2.validation().blocks_cached, 8);
        for v in v2.vips().iter().filter(|v| v.id() != 99) {
            assert_eq!(v.block_offset(), off[v.id() as usize]);
        }
        drop(v2);
        // Back to the original order: still nothing rewritten but the root
        // and VIP 3, and VIP 99's block retires.
        let s = w.publish(&g1, &[2]).unwrap();
        assert_eq!((s.blocks_written, s.reused_by_pointer), (2, 9), "{s:?}");
        let v3 = r.view_current().unwrap();
        assert_eq!(v3.to_generation(), g1);
        assert_eq!(v3.validation().blocks_hashed, 3);

        // Duplicate ids are refused.
        let mut g4 = g1.clone();
        g4.vips.swap(0, 1);
        g4.vips[0] = g4.vips[1].clone();
        let e = w.publish(&g4, &[3]).unwrap_err().to_string();
        assert_eq!(e, "invalid generation: vip id 0 is used twice");
        assert_eq!(w.published_generation(), 3);
    }

    /// A one-VIP generation whose ring is a pattern of `stamp`.
    fn stamped(stamp: u32, m: usize) -> Generation {
        let backends = (0..4u8)
            .map(|i| BackendEntry {
                id: u32::from(i),
                addr: IpAddr::from([10, 0, 0, i + 1]),
                port: 80,
                weight: stamp,
                state: BackendState::Up,
                max_connections: 0,
            })
            .collect();
        Generation {
            flow_hash_key: [stamp as u8; 16],
            vips: vec![Arc::new(VipTable {
                id: 0,
                name: "a".into(),
                addr: IpAddr::from([10, 9, 9, 9]),
                port: 80,
                proto: PROTO_TCP,
                mode: Mode::FullNat,
                flags: VipFlags::EMPTY,
                pp_max_len: 107,
                backends,
                ring: (0..m).map(|j| (j as u32 + stamp) % 4).collect(),
                limits: Default::default(),
                persistence_s: 0,
            })],
        }
    }

    /// A reader blocked in `wait_published` (another thread here, another
    /// process in border-dp) wakes on the next publication, not at its
    /// timeout; with nothing published it sleeps the whole timeout, and it
    /// returns at once when the word already moved past what it saw.
    #[test]
    fn a_publication_wakes_a_waiting_reader() {
        let path = TmpPath::new("wake");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        w.publish(&stamped(1, 64), &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        let seen = r.current();

        let t = Instant::now();
        r.wait_published(seen, Duration::from_millis(100));
        assert!(
            t.elapsed() >= Duration::from_millis(90),
            "{:?}",
            t.elapsed()
        );

        let waiter = std::thread::spawn(move || {
            let t = Instant::now();
            r.wait_published(seen, Duration::from_secs(10));
            (t.elapsed(), r.current().generation)
        });
        std::thread::sleep(Duration::from_millis(100));
        w.publish(&stamped(2, 64), &[]).unwrap();
        let (waited, generation) = waiter.join().unwrap();
        assert_eq!(generation, 2);
        assert!(
            waited < Duration::from_secs(5),
            "woke at the timeout: {waited:?}"
        );

        let r = TablesReader::open(&path.0).unwrap();
        let t = Instant::now();
        r.wait_published(seen, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn reclamation_respects_quiescent_generations() {
        let m = 4099;
        let block = vip_block_len(&stamped(0, m).vips[0]).div_ceil(64) * 64;
        // Room for two VIP blocks and a few roots, not three VIP blocks.
        let path = TmpPath::new("qsbr");
        let mut w = TablesWriter::create(&path.0, 2 * block + 4 * 128).unwrap();
        let slow = TablesReader::open(&path.0).unwrap();
        let fast = TablesReader::open(&path.0).unwrap();

        w.publish(&stamped(1, m), &[]).unwrap();
        let held = slow.view_current().unwrap(); // slow worker applies 1
        let x1 = held.vip(0).unwrap().block_offset();
        w.publish(&stamped(2, m), &[1, 1]).unwrap();
        assert_eq!(fast.view_current().unwrap().generation(), 2); // fast applies 2

        // The slow reader still holds generation 1: its block cannot be
        // reused, and there is no other room.
        let e = w.publish(&stamped(3, m), &[1, 2]).unwrap_err();
        assert!(
            matches!(
                e,
                TablesError::ArenaFull {
                    oldest_reader: Some(1),
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("held back by readers, oldest at generation 1"),
            "{e}"
        );
        assert_eq!(w.published_generation(), 2);
        // Nothing of generation 1 or 2 was touched.
        assert_eq!(held.to_generation(), stamped(1, m));
        assert_eq!(
            slow.view_uncached(held.published())
                .unwrap()
                .to_generation(),
            stamped(1, m)
        );
        assert_eq!(fast.view_current().unwrap().to_generation(), stamped(2, m));

        // Once the slow reader passes generation 2, the block is reused.
        drop(held);
        assert_eq!(slow.view_current().unwrap().generation(), 2);
        let st = w.publish(&stamped(3, m), &[2, 2]).unwrap();
        assert_eq!(st.generation, 3);
        assert!(st.blocks_reclaimed >= 1);
        let v3 = fast.view_current().unwrap();
        assert_eq!(v3.to_generation(), stamped(3, m));
        assert_eq!(v3.vip(0).unwrap().block_offset(), x1);

        // A reader that never reports (empty slice = no live readers) does
        // not hold anything back.
        for s in 4..20 {
            w.publish(&stamped(s, m), &[]).unwrap();
        }
        assert_eq!(fast.view_current().unwrap().to_generation(), stamped(19, m));
    }

    #[test]
    fn arena_full_keeps_old_generation() {
        let path = TmpPath::new("full");
        let mut w = TablesWriter::create(&path.0, 64 << 10).unwrap();
        let small = stamped(1, 1021);
        w.publish(&small, &[]).unwrap();
        let free = w.arena_free();
        let r = TablesReader::open(&path.0).unwrap();
        let big = stamped(2, 65537);
        let e = w.publish(&big, &[1]).unwrap_err();
        match &e {
            TablesError::ArenaFull { needed, .. } => assert!(*needed > 64 << 10),
            other => panic!("{other}"),
        }
        let need = vip_block_len(&big.vips[0]).div_ceil(64) * 64;
        let want = format!("arena full: a {need}-byte block does not fit");
        assert!(e.to_string().starts_with(&want), "{e}");
        assert_eq!(w.published_generation(), 1);
        assert_eq!(w.arena_free(), free);
        assert_eq!(r.view_current().unwrap().to_generation(), small);
        // Still usable afterwards.
        w.publish(&stamped(3, 1021), &[1]).unwrap();
        assert_eq!(r.view_current().unwrap().to_generation(), stamped(3, 1021));
    }

    #[test]
    fn invalid_generations_are_refused_before_writing() {
        let path = TmpPath::new("invalid");
        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        w.publish(&stamped(1, 61), &[]).unwrap();
        let mut g = stamped(2, 61);
        Arc::make_mut(&mut g.vips[0]).ring[7] = 4;
        let e = w.publish(&g, &[]).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid generation: vip 0: ring[7] = 4 but there are 4 backends"
        );
        let mut g = stamped(2, 61);
        g.vips.push(g.vips[0].clone());
        let e = w.publish(&g, &[]).unwrap_err().to_string();
        assert_eq!(e, "invalid generation: vip id 0 is used twice");
        let mut g = stamped(2, 61);
        Arc::make_mut(&mut g.vips[0]).proto = 1;
        assert!(w.publish(&g, &[]).is_err());
        assert_eq!(w.published_generation(), 1);
        let r = TablesReader::open(&path.0).unwrap();
        assert_eq!(r.view_current().unwrap().to_generation(), stamped(1, 61));
    }

    #[test]
    fn attach_after_crash_keeps_the_current_generation() {
        let path = TmpPath::new("attach");
        let cfg = big_config(10, 4, 401);
        let mut b = GenerationBuilder::new();
        let g1 = b.build(&cfg, &no_overrides).unwrap();
        let down = |v: usize, i: usize| (v == 3 && i == 1).then_some((1, BackendState::Down));
        let g2 = b.build(&cfg, &down).unwrap();

        let mut w = TablesWriter::create(&path.0, 1 << 20).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        w.publish(&g1, &[]).unwrap();
        w.publish(&g2, &[]).unwrap();
        let region = w.region_id();
        // A second publisher is refused while the first lives.
        assert!(matches!(
            TablesWriter::attach(&path.0),
            Err(TablesError::Busy { .. })
        ));
        assert!(matches!(
            TablesWriter::create(&path.0, 1 << 20),
            Err(TablesError::Busy { .. })
        ));
        let held = r.view_current().unwrap();
        assert_eq!(held.generation(), 2);

        drop(w); // the publisher "crashes"
        assert_eq!(r.current().generation, 2);
        assert_eq!(r.view_current().unwrap().to_generation(), g2);

        let mut w = TablesWriter::attach(&path.0).unwrap();
        assert_eq!(w.published_generation(), 2);
        assert_eq!(w.region_id(), region);
        assert_eq!(r.view_current().unwrap().to_generation(), g2);
        assert!(!r.replaced());

        // Same tables again, from a fresh builder (new Arcs): only the root
        // is written, every VIP block is recognised by its bytes.
        let g2b = GenerationBuilder::new().build(&cfg, &down).unwrap();
        let s = w.publish(&g2b, &[2]).unwrap();
        assert_eq!(
            (s.generation, s.blocks_written, s.blocks_reused),
            (3, 1, 10)
        );
        assert_eq!(r.view_current().unwrap().to_generation(), g2);
        // The view held across the crash is still intact.
        assert_eq!(held.to_generation(), g2);
        drop(held);

        // Publishing real changes works; retired blocks are reclaimed.
        let g4 = b.build(&cfg, &no_overrides).unwrap();
        let s = w.publish(&g4, &[3]).unwrap();
        assert!(s.blocks_reclaimed >= 1, "{s:?}");
        let v = r.view_current().unwrap();
        assert_eq!((v.generation(), v.to_generation()), (4, g4));
        // Many more publications fit: reclamation works after attach.
        for i in 0..50 {
            let g = if i % 2 == 0 { &g2 } else { &g1 };
            let cur = w.published_generation();
            w.publish(g, &[cur]).unwrap();
        }

        // Attaching to a region where nothing was published yet.
        let empty = TmpPath::new("attach-empty");
        drop(TablesWriter::create(&empty.0, 1 << 16).unwrap());
        let mut w2 = TablesWriter::attach(&empty.0).unwrap();
        assert_eq!(w2.published_generation(), 0);
        assert_eq!(w2.publish(&g1, &[]).unwrap().generation, 1);
    }

    #[test]
    fn create_replaces_the_file_readers_keep_the_old_one() {
        let path = TmpPath::new("recreate");
        let mut w = TablesWriter::create(&path.0, 1 << 16).unwrap();
        w.publish(&stamped(1, 61), &[]).unwrap();
        let r = TablesReader::open(&path.0).unwrap();
        drop(w);
        let mut w = TablesWriter::create(&path.0, 1 << 16).unwrap();
        assert_ne!(w.region_id(), r.region_id());
        assert!(r.replaced());
        assert_eq!(r.view_current().unwrap().to_generation(), stamped(1, 61));
        w.publish(&stamped(2, 61), &[]).unwrap();
        let r2 = TablesReader::open(&path.0).unwrap();
        assert_eq!(r2.region_id(), w.region_id());
        assert_eq!(r2.view_current().unwrap().to_generation(), stamped(2, 61));
    }

    #[test]
    fn version_mismatch_names_both_versions() {
        let path = TmpPath::new("version");
        drop(TablesWriter::create(&path.0, 1 << 16).unwrap());
        let mut bytes = std::fs::read(&path.0).unwrap();
        bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
        std::fs::write(&path.0, &bytes).unwrap();
        let want = format!(
            "layout version 7 is not supported (this build speaks {TABLES_LAYOUT_VERSION})"
        );
        let e = TablesReader::open(&path.0).unwrap_err();
        assert!(matches!(
            e,
            TablesError::Version {
                found: 7,
                expected: TABLES_LAYOUT_VERSION,
                ..
            }
        ));
        assert!(e.to_string().ends_with(&want), "{e}");
        let e = TablesWriter::attach(&path.0).unwrap_err().to_string();
        assert!(e.ends_with(&want), "{e}");
        bytes[0] = b'X';
        std::fs::write(&path.0, &bytes).unwrap();
        assert!(matches!(
            TablesReader::open(&path.0),
            Err(TablesError::BadMagic { .. })
        ));
    }

    #[test]
    fn tables_path_names_the_instance() {
        assert_eq!(
            tables_path("demo"),
            PathBuf::from("/dev/shm/border-demo-tables")
        );
    }

    /// The concurrent test's VIP `k` at stamp `s`: ring and first weight
    /// encode `s`.
    fn conc_vip(k: u32, s: u32) -> Arc<VipTable> {
        let backends = (0..4u8)
            .map(|i| BackendEntry {
                id: u32::from(i),
                addr: IpAddr::from([10, 0, k as u8, i + 1]),
                port: 80,
                weight: if i == 0 { s } else { 1 },
                state: BackendState::Up,
                max_connections: 0,
            })
            .collect();
        Arc::new(VipTable {
            id: k,
            name: format!("v{k}"),
            addr: IpAddr::from([10, 9, 0, k as u8]),
            port: 80,
            proto: PROTO_TCP,
            mode: Mode::FullNat,
            flags: VipFlags::EMPTY,
            pp_max_len: 107,
            backends,
            ring: (0..61u32).map(|j| (j + s) % 4).collect(),
            limits: Default::default(),
            persistence_s: 0,
        })
    }

    #[test]
    fn concurrent_reader_sees_only_consistent_generations() {
        const V: u64 = 8;
        const N: u64 = 1000;
        let path = TmpPath::new("concurrent");
        // Room for ~4 generations: the writer regularly waits for the reader.
        let mut w = TablesWriter::create(&path.0, 8 << 10).unwrap();
        let applied = Arc::new(AtomicU64::new(0));
        let r = TablesReader::open(&path.0).unwrap();

        let reader = {
            let applied = Arc::clone(&applied);
            std::thread::spawn(move || {
                // Stamp of VIP k in generation g: the last n <= g with n % V == k.
                let expect = |g: u64, k: u64| if g < k { 0 } else { g - (g - k) % V };
                let check = |v: &TablesView<'_>| {
                    let g = v.generation();
                    assert_eq!(v.vip_count() as u64, V);
                    for k in 0..V {
                        let vip = v.vip(k as usize).unwrap();
                        let s = expect(g, k) as u32;
                        assert_eq!(vip.id() as u64, k);
                        assert_eq!(vip.backends()[0].weight, s, "gen {g} vip {k}");
                        for (j, &e) in vip.ring().iter().enumerate() {
                            assert_eq!(e, (j as u32 + s) % 4, "gen {g} vip {k}");
                        }
                    }
                };
                let start = Instant::now();
                let mut adopted = 0u64;
                let mut last = Published::NONE;
                let mut cur: Option<TablesView<'_>> = None;
                loop {
                    let p = r.current();
                    if p != last {
                        let v = r.view(p).unwrap_or_else(|e| panic!("{e}"));
                        assert_eq!(v.generation(), p.generation);
                        assert!(p.generation > last.generation);
                        check(&v);
                        // The view we still hold has not been touched.
                        if let Some(old) = &cur {
                            check(old);
                        }
                        cur = Some(v);
                        applied.store(p.generation, Ordering::Release);
                        last = p;
                        adopted += 1;
                        if p.generation == N {
                            return adopted;
                        }
                    } else {
                        std::thread::yield_now();
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(120),
                        "reader stuck at {last:?}"
                    );
                }
            })
        };

        let mut vips: Vec<Arc<VipTable>> = (0..V as u32).map(|k| conc_vip(k, 0)).collect();
        let mut waits = 0u64;
        for n in 1..=N {
            let k = (n % V) as usize;
            vips[k] = conc_vip(k as u32, n as u32);
            let gen = Generation {
                flow_hash_key: [0; 16],
                vips: vips.clone(),
            };
            loop {
                match w.publish(&gen, &[applied.load(Ordering::Acquire)]) {
                    Ok(s) => {
                        assert_eq!(s.generation, n);
                        assert!(n == 1 || s.blocks_written == 2, "{s:?}");
                        break;
                    }
                    Err(TablesError::ArenaFull { .. }) => {
                        waits += 1;
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let adopted = reader.join().unwrap();
        assert!(adopted >= 1);
        eprintln!("reader adopted {adopted} of {N} generations; writer waited {waits} times");
    }
}
