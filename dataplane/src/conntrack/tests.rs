use std::collections::HashMap;
use std::time::Instant;

use proptest::prelude::*;

use super::*;

const SYN: u8 = TcpFlags::SYN.0;
const ACK: u8 = TcpFlags::ACK.0;
const FIN: u8 = TcpFlags::FIN.0;
const RST: u8 = TcpFlags::RST.0;
const PSH: u8 = TcpFlags::PSH.0;
const TCP: u8 = 6;
const UDP: u8 = 17;

const T: Timeouts = Timeouts {
    tcp_syn: 30,
    tcp_established: 900,
    tcp_closing: 10,
    udp: 300,
    local_port_cooldown: 60,
};

fn seeded<V: Copy>(capacity: usize, t: Timeouts) -> Conntrack<V> {
    Conntrack::with_hasher(capacity, t, RandomState::with_seeds(1, 2, 3, 4))
}

fn client(port: u16) -> FlowKey {
    FlowKey::v4([192, 0, 2, 1], [10, 10, 0, 100], port, 80, TCP)
}

/// Full-NAT reply key: backend -> local address:port.
fn fullnat_reply(local_port: u16) -> FlowKey {
    FlowKey::v4([10, 20, 0, 11], [10, 20, 0, 1], 8080, local_port, TCP)
}

fn none(_: EntryId, _: &Entry<u32>) {}

/// A segment of `flags` at sequence 0, or for a RST at the sequence number
/// the receiver expects; panics if a RST is refused.
fn tcp<V: Copy>(ct: &mut Conntrack<V>, id: EntryId, dir: Dir, flags: u8, now: u64) -> State {
    ct.update_tcp(id, dir, &exact_seg(ct, id, dir, flags), now)
        .unwrap_or_else(|fit| panic!("{flags:#04x} from {dir:?} refused: {fit:?}"))
}

/// A segment of `flags` at sequence 0; a RST at the number its receiver
/// expects, when the entry knows one.
fn exact_seg<V: Copy>(ct: &Conntrack<V>, id: EntryId, dir: Dir, flags: u8) -> TcpSeg {
    let mut seg = TcpSeg::flags(flags);
    if flags & RST != 0 {
        seg.seq = ct.get(id).tcp().exact_rst_seq(dir as usize).unwrap_or(0);
    }
    // The client's ACK of a SYN-ACK (at sequence 0) acknowledges it.
    if ct.get(id).state() == State::SynRecv && dir == Dir::Original && flags & ACK != 0 {
        seg.ack = 1;
    }
    seg
}

impl Index {
    /// Structural invariants, given the hash of each reference's key;
    /// panics with a description on violation: every word's tag is its
    /// key's, each bucket's overflow counts the keys stored past it (from
    /// a home before it), and every key is found by its probe.
    pub(super) fn check(&self, mut hash_of: impl FnMut(u32) -> u32) {
        let n = self.buckets.len();
        let mut overflow = vec![0u32; n];
        for (j, b) in self.buckets.iter().enumerate() {
            for (way, &w) in b.words.iter().enumerate().filter(|(_, &w)| w != 0) {
                let r = (w & self.ref_mask) - 1;
                let h = hash_of(r);
                assert_eq!(w & !self.ref_mask, self.tag(h), "tag of {r} in bucket {j}");
                let mut i = self.home(h);
                // (A bucket passed may have room again since: deletes
                // do not move keys back.)
                while i != j {
                    overflow[i] += 1;
                    i = self.next(i);
                }
                let at = At { bucket: j, way };
                assert_eq!(self.find(h, |x| x == r), Some((at, r)), "{r} found");
            }
        }
        for (j, b) in self.buckets.iter().enumerate() {
            assert_eq!(b.overflow, overflow[j], "overflow count of bucket {j}");
        }
    }
}

impl<V: Copy> Conntrack<V> {
    /// Structural invariants; panics with a description on violation.
    pub(super) fn check(&self) {
        self.index.check(|r| {
            let e = &self.slots[slot_of(r)];
            assert!(e.is_live(), "index names free slot {}", slot_of(r));
            self.hash(e.key(dir_of(r)))
        });
        let used: usize = self
            .index
            .buckets
            .iter()
            .map(|b| b.words.iter().filter(|&&w| w != 0).count())
            .sum();
        assert_eq!(used, 2 * self.len, "two index keys per entry");
        let half_open = self
            .slots
            .iter()
            .filter(|e| e.is_live() && e.state.is_half_open())
            .count();
        assert_eq!(half_open, self.half_open_now, "the half-open count");
        assert!(
            self.index.buckets.len() * FILL >= 2 * self.capacity,
            "at most {FILL} keys per bucket"
        );
        assert!(self.slots.len() <= self.capacity);
        assert_eq!(
            self.slots.capacity(),
            self.capacity,
            "slab never reallocates"
        );
        let live = self.slots.iter().filter(|e| e.is_live()).count();
        assert_eq!(live, self.len);
        let mut on_free_list = vec![false; self.slots.len()];
        let mut f = self.free;
        while f != NIL {
            let s = f as usize;
            assert!(!self.slots[s].is_live(), "live slot {s} on the free list");
            assert!(!on_free_list[s], "free list cycle at {s}");
            on_free_list[s] = true;
            f = self.slots[s].next_free;
        }
        assert_eq!(
            on_free_list.iter().filter(|&&b| b).count() + live,
            self.slots.len()
        );
        for (s, e) in self.slots.iter().enumerate().filter(|(_, e)| e.is_live()) {
            for dir in [Dir::Original, Dir::Reply] {
                let r = self.find(self.hash(e.key(dir)), e.key(dir));
                assert_eq!(r, Some(index_ref(s, dir)), "slot {s} {dir:?} indexed");
            }
        }
        assert!(self.cursor < self.slots.len().max(1));
        assert_eq!(
            self.hints.len(),
            self.slots.len(),
            "one sweep hint per slot"
        );
        assert_eq!(
            self.hints.capacity(),
            self.capacity,
            "hints never reallocate"
        );
        for (s, (e, &h)) in self.slots.iter().zip(&self.hints).enumerate() {
            if e.is_live() {
                assert!(
                    h <= coarse(e.expires_at),
                    "slot {s}: hint {h} after deadline {}",
                    e.expires_at
                );
            } else {
                assert_eq!(h, FREE, "free slot {s} has a hint");
            }
        }
    }
}

#[test]
fn flow_keys() {
    let k = FlowKey::v4([192, 0, 2, 1], [10, 0, 0, 1], 1234, 80, TCP);
    assert_eq!(&k.src[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    assert_eq!(k.src_ip(), "192.0.2.1".parse::<IpAddr>().unwrap());
    assert_eq!(k.dst_ip(), "10.0.0.1".parse::<IpAddr>().unwrap());
    let r = k.reversed();
    assert_eq!((r.src, r.dst, r.sport, r.dport), (k.dst, k.src, 80, 1234));
    assert_eq!(r.reversed(), k);
    assert_eq!(format!("{k:?}"), "proto 6 192.0.2.1:1234 -> 10.0.0.1:80");
    // IPv4 and IPv4-mapped IPv6 are different flows.
    let m = FlowKey::v6(k.src, k.dst, 1234, 80, TCP);
    assert_ne!(m, k);
    assert_eq!(
        format!("{m:?}"),
        "proto 6 [::ffff:192.0.2.1]:1234 -> [::ffff:10.0.0.1]:80"
    );
}

#[test]
fn insert_and_lookup_both_directions() {
    let mut ct = seeded::<u32>(16, T);
    let (o, r) = (client(40000), fullnat_reply(2000));
    let id = ct.insert(o, r, 7, State::SynSent, 1000, none).unwrap();
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.lookup(&o, 1000), Some((id, Dir::Original)));
    assert_eq!(ct.lookup(&r, 1000), Some((id, Dir::Reply)));
    assert_eq!(ct.lookup(&o.reversed(), 1000), None);
    assert_eq!(ct.lookup(&client(40001), 1000), None);
    let e = ct.get(id);
    assert_eq!(
        (e.value, e.state(), e.created_at()),
        (7, State::SynSent, 1000)
    );
    assert_eq!(e.expires_at(), 1000 + 30_000);
    assert_eq!((e.orig(), e.reply()), (&o, &r));
    ct.get_mut(id).value = 8;
    assert_eq!(ct.get(id).value, 8);
    assert_eq!(ct.get(id).tcp(), &TcpTrack::NEW);

    // DNAT: the reply key is the backend -> client direction.
    let o6 = FlowKey::v6(
        [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xfd; 16],
        5000,
        53,
        UDP,
    );
    let r6 = FlowKey {
        src: [0xfe; 16],
        ..o6.reversed()
    };
    let id6 = ct.insert(o6, r6, 9, State::Udp, 1000, none).unwrap();
    assert_ne!(id6, id);
    assert_eq!(ct.lookup(&r6, 2000), Some((id6, Dir::Reply)));
    assert_eq!(ct.get(id6).expires_at(), 1000 + 300_000);

    let gone = ct.remove(id).unwrap();
    assert_eq!((gone.value, gone.orig()), (8, &o));
    assert_eq!(ct.lookup(&o, 1000), None);
    assert_eq!(ct.lookup(&r, 1000), None);
    assert!(!ct.is_live(id));
    assert!(ct.remove(id).is_none(), "second remove is a no-op");
    assert_eq!(ct.len(), 1);
    ct.check();
}

#[test]
fn expiry_by_state_timeout() {
    let mut ct = seeded::<u32>(64, T);
    let cases = [
        (State::SynSent, 30_000),
        (State::SynRecv, 30_000),
        (State::Established, 900_000),
        (State::FinWait, 10_000),
        (State::TimeWait, 10_000),
        (State::Closed, 10_000),
        (State::Udp, 300_000),
    ];
    let t0 = 5_000;
    for (i, &(state, ms)) in cases.iter().enumerate() {
        let o = client(1000 + i as u16);
        let id = ct
            .insert(o, fullnat_reply(1000 + i as u16), 0, state, t0, none)
            .unwrap();
        assert_eq!(ct.timeout_ms(state), ms);
        assert_eq!(ct.get(id).expires_at(), t0 + ms, "{state:?}");
        assert_eq!(
            ct.lookup(&o, t0 + ms - 1),
            Some((id, Dir::Original)),
            "{state:?}"
        );
        assert_eq!(
            ct.lookup(&o, t0 + ms),
            None,
            "{state:?} expired at the deadline"
        );
        assert!(ct.is_live(id), "expired but not yet reclaimed");
    }
    // Refreshing: touch extends by the state's timeout.
    let o = client(1000);
    let (id, _) = ct.lookup(&o, t0).unwrap();
    ct.touch(id, t0 + 20_000);
    assert_eq!(ct.get(id).expires_at(), t0 + 50_000);
    assert_eq!(ct.lookup(&o, t0 + 49_999), Some((id, Dir::Original)));

    // A full sweep reclaims exactly the expired ones.
    let mut freed = Vec::new();
    let n = ct.expire(t0 + 299_999, usize::MAX, |_, e| freed.push(e.state()));
    freed.sort_by_key(|s| *s as u8);
    assert_eq!(n, 5);
    assert_eq!(
        freed,
        [
            State::SynSent,
            State::SynRecv,
            State::FinWait,
            State::TimeWait,
            State::Closed
        ]
    );
    assert_eq!(ct.len(), 2);
    ct.check();
}

#[test]
fn timeouts_from_config_and_reload() {
    let mut ct = seeded::<()>(8, Timeouts::default());
    assert_eq!(ct.timeouts(), conf::Timeouts::default());
    assert_eq!(ct.timeout_ms(State::Established), 900_000);
    let id = ct
        .insert(client(1), fullnat_reply(1), (), State::Udp, 0, |_, _| {})
        .unwrap();
    ct.set_timeouts(Timeouts { udp: 5, ..T });
    assert_eq!(ct.get(id).expires_at(), 300_000, "existing deadline stays");
    ct.touch(id, 1000);
    assert_eq!(ct.get(id).expires_at(), 6000);
}

#[test]
fn full_table_refuses_and_keeps_existing() {
    let mut ct = seeded::<u32>(4, T);
    let ids: Vec<_> = (0..4)
        .map(|i| {
            ct.insert(
                client(i),
                fullnat_reply(i),
                u32::from(i),
                State::Established,
                0,
                none,
            )
            .unwrap()
        })
        .collect();
    assert!(ct.is_full());
    assert_eq!(
        ct.insert(client(9), fullnat_reply(9), 9, State::SynSent, 1, none),
        Err(InsertError::Full)
    );
    // Even when every existing entry is long idle but not expired.
    assert_eq!(
        ct.insert(
            client(9),
            fullnat_reply(9),
            9,
            State::SynSent,
            899_999,
            none
        ),
        Err(InsertError::Full)
    );
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(
            ct.lookup(&client(i as u16), 899_999),
            Some((id, Dir::Original))
        );
        assert_eq!(ct.get(id).value, i as u32);
    }
    assert_eq!(ct.len(), 4);
    ct.check();
    // Room again after a remove.
    ct.remove(ids[2]).unwrap();
    let id = ct
        .insert(client(9), fullnat_reply(9), 9, State::SynSent, 1, none)
        .unwrap();
    assert_eq!(id, ids[2], "the freed slot is reused");
    ct.check();
}

#[test]
fn full_table_reclaims_an_expired_holder_of_the_key() {
    let mut ct = seeded::<u32>(2, T);
    ct.insert(client(1), fullnat_reply(1), 1, State::SynSent, 0, none)
        .unwrap();
    ct.insert(client(2), fullnat_reply(2), 2, State::Established, 0, none)
        .unwrap();
    // Client 1 retries its tuple after the SYN timeout: its stale entry goes.
    let mut freed = Vec::new();
    let id = ct
        .insert(
            client(1),
            fullnat_reply(3),
            3,
            State::SynSent,
            30_000,
            |_, e| freed.push(e.value),
        )
        .unwrap();
    assert_eq!(freed, [1]);
    assert_eq!(ct.lookup(&client(1), 30_000), Some((id, Dir::Original)));
    assert_eq!(
        ct.lookup(&fullnat_reply(1), 0),
        None,
        "old reply key unindexed"
    );
    assert_eq!(ct.len(), 2);
    ct.check();
}

#[test]
fn key_collisions() {
    let mut ct = seeded::<u32>(8, T);
    let a = ct
        .insert(client(1), fullnat_reply(2000), 1, State::SynSent, 0, none)
        .unwrap();
    // Full-NAT local port still in use by a live entry.
    assert_eq!(
        ct.insert(client(2), fullnat_reply(2000), 2, State::SynSent, 10, none),
        Err(InsertError::ReplyInUse(a))
    );
    // The caller picks another port.
    let b = ct
        .insert(client(2), fullnat_reply(2001), 2, State::SynSent, 10, none)
        .unwrap();
    // Original key already tracked (in either direction).
    assert_eq!(
        ct.insert(client(1), fullnat_reply(2002), 3, State::SynSent, 10, none),
        Err(InsertError::OrigInUse(a))
    );
    assert_eq!(
        ct.insert(
            fullnat_reply(2001),
            fullnat_reply(2003),
            3,
            State::SynSent,
            10,
            none
        ),
        Err(InsertError::OrigInUse(b))
    );
    assert_eq!(
        ct.insert(client(3), client(2), 3, State::SynSent, 10, none),
        Err(InsertError::ReplyInUse(b))
    );
    assert_eq!(
        ct.insert(client(1), client(1), 3, State::SynSent, 10, none),
        Err(InsertError::SameKeys)
    );
    // OrigInUse is reported before ReplyInUse.
    assert_eq!(
        ct.insert(client(1), fullnat_reply(2001), 3, State::SynSent, 10, none),
        Err(InsertError::OrigInUse(a))
    );
    assert_eq!(ct.len(), 2);
    // After `a` expires (SYN timeout), its reply key is free again, and the
    // expired holder is reported once.
    let mut freed = Vec::new();
    let c = ct
        .insert(
            client(4),
            fullnat_reply(2000),
            4,
            State::SynSent,
            30_000,
            |_, e| freed.push(e.value),
        )
        .unwrap();
    assert_eq!(freed, [1]);
    assert_eq!(
        ct.lookup(&fullnat_reply(2000), 30_000),
        Some((c, Dir::Reply))
    );
    // Two different expired holders of orig and reply: both reclaimed.
    let mut freed = Vec::new();
    let d = ct
        .insert(
            client(2),
            fullnat_reply(2000),
            5,
            State::Udp,
            90_000,
            |_, e| freed.push(e.value),
        )
        .unwrap();
    freed.sort();
    assert_eq!(freed, [2, 4]);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.lookup(&client(2), 90_000), Some((d, Dir::Original)));
    // One expired entry holding both keys (swapped) is reclaimed once.
    let mut freed = Vec::new();
    ct.insert(
        fullnat_reply(2000),
        client(2),
        6,
        State::Udp,
        400_000,
        |_, e| freed.push(e.value),
    )
    .unwrap();
    assert_eq!(freed, [5]);
    ct.check();
}

#[test]
fn tcp_handshake_data_and_close() {
    let mut ct = seeded::<u32>(8, T);
    let id = ct
        .insert(client(1), fullnat_reply(1), 0, State::SynSent, 0, none)
        .unwrap();
    assert_eq!(tcp(&mut ct, id, Dir::Original, SYN, 1_000), State::SynSent);
    assert_eq!(ct.get(id).expires_at(), 31_000, "SYN retransmit refreshes");
    assert_eq!(
        tcp(&mut ct, id, Dir::Reply, SYN | ACK, 2_000),
        State::SynRecv
    );
    assert_eq!(ct.get(id).expires_at(), 32_000);
    assert_eq!(
        tcp(&mut ct, id, Dir::Reply, SYN | ACK, 2_500),
        State::SynRecv
    );
    assert_eq!(
        tcp(&mut ct, id, Dir::Original, ACK, 3_000),
        State::Established
    );
    assert_eq!(ct.get(id).expires_at(), 903_000);
    assert!(!ct.is_closing(id));
    // A SYN on an established entry changes nothing.
    assert_eq!(
        tcp(&mut ct, id, Dir::Original, SYN, 4_000),
        State::Established
    );
    assert_eq!(ct.get(id).expires_at(), 903_000);
    assert_eq!(
        tcp(&mut ct, id, Dir::Reply, PSH | ACK, 5_000),
        State::Established
    );
    assert_eq!(ct.get(id).expires_at(), 905_000);
    // Client closes.
    assert_eq!(
        tcp(&mut ct, id, Dir::Original, FIN | ACK, 6_000),
        State::FinWait
    );
    assert!(ct.is_closing(id));
    assert!(ct.get(id).fin_seen(Dir::Original) && !ct.get(id).fin_seen(Dir::Reply));
    assert_eq!(ct.get(id).expires_at(), 16_000);
    // Half-closed: the server keeps sending, each segment refreshes.
    assert_eq!(tcp(&mut ct, id, Dir::Reply, ACK, 15_000), State::FinWait);
    assert_eq!(ct.get(id).expires_at(), 25_000);
    assert_eq!(
        tcp(&mut ct, id, Dir::Reply, FIN | ACK, 16_000),
        State::TimeWait
    );
    assert_eq!(
        tcp(&mut ct, id, Dir::Original, ACK, 16_001),
        State::TimeWait
    );
    assert_eq!(ct.get(id).expires_at(), 26_001);
    assert!(ct.is_closing(id));
    assert_eq!(ct.lookup(&client(1), 26_001), None);
}

/// Direct server return: only the client's segments pass. Its ACK after
/// the SYN establishes the flow (no SYN-ACK is ever seen), its FIN starts
/// the close, its RST at its next sequence number closes; a two-way entry
/// stays half-open on the same segments.
#[test]
fn one_way_entries_follow_the_client_alone() {
    let mut ct = seeded::<u32>(8, T);
    let one = ct
        .insert(client(1), fullnat_reply(1), 0, State::SynSent, 0, none)
        .unwrap();
    let two = ct
        .insert(client(2), fullnat_reply(2), 0, State::SynSent, 0, none)
        .unwrap();
    ct.mark_one_way(one);
    for id in [one, two] {
        assert_eq!(tcp(&mut ct, id, Dir::Original, SYN, 1_000), State::SynSent);
    }
    assert_eq!(tcp(&mut ct, two, Dir::Original, ACK, 2_000), State::SynSent);
    assert_eq!(
        tcp(&mut ct, one, Dir::Original, ACK, 2_000),
        State::Established
    );
    assert_eq!(ct.get(one).expires_at(), 902_000, "the established timeout");
    assert_eq!(ct.half_open_len(), 1, "only the two-way entry is half-open");
    let mut data = TcpSeg::flags(PSH | ACK);
    data.seq = 1;
    data.len = 100;
    assert_eq!(
        ct.update_tcp(one, Dir::Original, &data, 3_000),
        Ok(State::Established)
    );
    assert_eq!(
        tcp(&mut ct, one, Dir::Original, FIN | ACK, 4_000),
        State::FinWait
    );
    assert_eq!(ct.get(one).expires_at(), 14_000);
    // A RST at the client's next sequence number closes it.
    assert_eq!(
        tcp(&mut ct, one, Dir::Original, RST | ACK, 5_000),
        State::Closed
    );
    // A client's mid-stream ACK (no SYN seen: a restart, an ECMP move)
    // establishes a one-way entry at once.
    let mid = ct
        .insert(client(3), fullnat_reply(3), 0, State::SynSent, 0, none)
        .unwrap();
    ct.mark_one_way(mid);
    assert_eq!(
        tcp(&mut ct, mid, Dir::Original, ACK, 6_000),
        State::Established
    );
    ct.check();
}

#[test]
fn tcp_rst_closes_and_is_not_refreshed() {
    for (from_flags, dir) in [
        (&[(Dir::Original, SYN)][..], Dir::Original),
        (
            &[(Dir::Original, SYN), (Dir::Reply, SYN | ACK)][..],
            Dir::Reply,
        ),
        (
            &[
                (Dir::Original, SYN),
                (Dir::Reply, SYN | ACK),
                (Dir::Original, ACK),
            ][..],
            Dir::Original,
        ),
        (
            &[(Dir::Original, ACK), (Dir::Original, FIN | ACK)][..],
            Dir::Reply,
        ),
    ] {
        let mut ct = seeded::<u32>(8, T);
        let id = ct
            .insert(client(1), fullnat_reply(1), 0, State::SynSent, 0, none)
            .unwrap();
        for &(d, f) in from_flags {
            tcp(&mut ct, id, d, f, 100);
        }
        assert_eq!(tcp(&mut ct, id, dir, RST | ACK, 1_000), State::Closed);
        assert_eq!(ct.get(id).expires_at(), 11_000);
        assert!(ct.is_closing(id));
        for f in [RST, ACK, SYN, FIN | ACK, SYN | ACK] {
            assert_eq!(tcp(&mut ct, id, dir.reverse(), f, 5_000), State::Closed);
        }
        ct.touch(id, 5_000);
        assert_eq!(
            ct.get(id).expires_at(),
            11_000,
            "nothing revives a reset flow"
        );
    }
}

#[test]
fn tcp_established_from_data_both_ways() {
    // Mid-handshake pickup: SYN seen, SYN-ACK missed, then data both ways.
    let mut ct = seeded::<u32>(8, T);
    let id = ct
        .insert(client(1), fullnat_reply(1), 0, State::SynSent, 0, none)
        .unwrap();
    assert_eq!(tcp(&mut ct, id, Dir::Original, ACK, 10), State::SynSent);
    assert_eq!(ct.get(id).expires_at(), 30_010);
    assert_eq!(
        tcp(&mut ct, id, Dir::Original, PSH | ACK, 20),
        State::SynSent
    );
    assert_eq!(tcp(&mut ct, id, Dir::Reply, ACK, 30), State::Established);
    // An orig-side ACK in SynSent (no SYN-ACK seen) is not enough.
    let id = ct
        .insert(client(2), fullnat_reply(2), 0, State::SynSent, 0, none)
        .unwrap();
    assert_eq!(tcp(&mut ct, id, Dir::Reply, ACK, 10), State::SynSent);
    assert_eq!(tcp(&mut ct, id, Dir::Original, ACK, 20), State::Established);
    // SYN-ACK in the wrong direction is ignored.
    let id = ct
        .insert(client(3), fullnat_reply(3), 0, State::SynSent, 0, none)
        .unwrap();
    assert_eq!(
        tcp(&mut ct, id, Dir::Original, SYN | ACK, 10),
        State::SynSent
    );
    assert_eq!(ct.get(id).expires_at(), 30_000);
    // A FIN before the handshake completes closes.
    assert_eq!(tcp(&mut ct, id, Dir::Original, FIN, 20), State::FinWait);
}

#[test]
fn syn_on_closing_entry_picks_afresh() {
    let mut ct = seeded::<u32>(8, T);
    let o = client(1);
    let id = ct
        .insert(o, fullnat_reply(1), 1, State::Established, 0, none)
        .unwrap();
    tcp(&mut ct, id, Dir::Original, FIN | ACK, 100);
    tcp(&mut ct, id, Dir::Reply, FIN | ACK, 110);
    // The client reuses its port: the pipeline sees a SYN on a closing entry.
    let (found, dir) = ct.lookup(&o, 2_000).unwrap();
    assert_eq!((found, dir), (id, Dir::Original));
    assert!(ct.is_closing(found));
    assert_eq!(
        tcp(&mut ct, found, Dir::Original, SYN, 2_000),
        State::TimeWait,
        "SYN alone changes nothing"
    );
    let old = ct.remove(found).unwrap();
    assert_eq!(old.value, 1);
    let new = ct
        .insert(o, fullnat_reply(2), 2, State::SynSent, 2_000, none)
        .unwrap();
    assert_eq!(ct.lookup(&o, 2_000), Some((new, Dir::Original)));
    assert!(!ct.is_closing(new));
}

#[test]
fn udp_entries_use_touch_and_ignore_tcp_flags() {
    let mut ct = seeded::<u32>(8, T);
    let o = FlowKey::v4([192, 0, 2, 1], [10, 10, 0, 100], 5353, 53, UDP);
    let id = ct.insert(o, o.reversed(), 0, State::Udp, 0, none).unwrap();
    ct.touch(id, 100_000);
    assert_eq!(ct.get(id).expires_at(), 400_000);
    assert_eq!(tcp(&mut ct, id, Dir::Original, RST, 200_000), State::Udp);
    assert_eq!(ct.get(id).expires_at(), 500_000);
}

#[test]
fn expire_is_bounded_and_eventually_reclaims() {
    let cap = 1000;
    let mut ct = seeded::<u32>(cap, T);
    for i in 0..cap as u16 {
        // Every third entry is established (long timeout); the rest UDP.
        let state = if i % 3 == 0 {
            State::Established
        } else {
            State::Udp
        };
        ct.insert(client(i), fullnat_reply(i), u32::from(i), state, 0, none)
            .unwrap();
    }
    let expected = (0..cap).filter(|i| i % 3 != 0).count();
    assert_eq!(
        ct.expire(299_999, usize::MAX, none),
        0,
        "nothing expired yet"
    );

    let now = 300_000;
    let budget = 7;
    let mut calls = 0;
    let mut freed = Vec::new();
    while freed.len() < expected {
        let before = ct.cursor;
        let n = ct.expire(now, budget, |_, e| freed.push(e.value));
        assert!(n <= budget);
        assert_eq!(
            ct.cursor,
            (before + budget) % cap,
            "examined exactly `budget` slots"
        );
        calls += 1;
        assert!(
            calls <= cap.div_ceil(budget),
            "reclaimed within capacity/budget calls"
        );
    }
    freed.sort();
    freed.dedup();
    assert_eq!(freed.len(), expected, "each reported once");
    assert!(freed.iter().all(|v| v % 3 != 0));
    assert_eq!(ct.len(), cap - expected);
    for _ in 0..cap {
        assert_eq!(ct.expire(now, budget, none), 0);
    }
    ct.check();
    // Budget 0 does nothing; an empty table is fine.
    assert_eq!(ct.expire(u64::MAX, 0, none), 0);
    let mut empty = seeded::<u32>(4, T);
    assert_eq!(empty.expire(u64::MAX, 100, none), 0);
}

#[test]
fn churn_at_capacity_keeps_index_in_place() {
    let cap = 512;
    let mut ct = seeded::<u64>(cap, T);
    let (slab_ptr, index_ptr) = (ct.slots.as_ptr(), ct.index.buckets.as_ptr());
    let mut now = 0;
    let mut port = 0u16;
    for round in 0..200 {
        while !ct.is_full() {
            port = port.wrapping_add(1);
            let _ = ct.insert(
                client(port),
                fullnat_reply(port),
                u64::from(port),
                State::SynSent,
                now,
                |_, _| {},
            );
        }
        now += 31_000;
        let freed = ct.expire(now, cap, |_, _| {});
        assert_eq!(freed, cap, "round {round}");
    }
    assert_eq!(ct.slots.as_ptr(), slab_ptr);
    assert_eq!(ct.index.buckets.as_ptr(), index_ptr);
    ct.check();
}

#[test]
fn million_entries_construct_fast() {
    let t = Instant::now();
    let ct = Conntrack::<[u8; 40]>::new(1 << 20, Timeouts::default());
    let took = t.elapsed();
    assert!(took.as_millis() < 500, "construction took {took:?}");
    assert_eq!(ct.capacity(), 1 << 20);
    assert!(ct.is_empty() && !ct.is_full());
    assert_eq!(core::mem::size_of::<Entry<()>>(), 128);
    assert_eq!(core::mem::size_of::<Entry<[u8; 40]>>(), 192);
    assert_eq!(core::mem::align_of::<Entry<[u8; 40]>>(), 64);
    let per_entry = ct.memory_bytes() / ct.capacity();
    assert_eq!(per_entry, 192 + 4 + 8 + 16, "{} bytes", ct.memory_bytes());
}

#[test]
#[should_panic(expected = "out of range")]
fn zero_capacity_is_refused() {
    let _ = Conntrack::<u32>::new(0, T);
}

// ---------------------------------------------------------------------------
// Model-based property test against a plain HashMap.

/// Test timeouts: short, so sequences cross them often.
const MT: Timeouts = Timeouts {
    tcp_syn: 2,
    tcp_established: 9,
    tcp_closing: 1,
    udp: 4,
    local_port_cooldown: 60,
};

/// 48 keys: 24 distinct tuples and their reverses, so orig/reply keys of
/// different entries collide often.
fn key(n: u8) -> FlowKey {
    let n = n % 48;
    let m = n % 24;
    let (a, b, p, six) = (m % 3, (m / 3) % 2, (m / 6) % 2, m / 12 == 1);
    let proto = if p == 0 { TCP } else { UDP };
    let k = if six {
        let mut s = [0x20; 16];
        s[15] = a;
        let mut d = [0xfd; 16];
        d[15] = b;
        FlowKey::v6(s, d, 1000 + u16::from(a), 80, proto)
    } else {
        FlowKey::v4([10, 0, 0, a], [10, 0, 1, b], 1000, 80 + u16::from(b), proto)
    };
    if n >= 24 {
        k.reversed()
    } else {
        k
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct M {
    keys: [FlowKey; 2],
    value: u32,
    state: State,
    fin: [bool; 2],
    seen: [bool; 2],
    created: u64,
    expires: u64,
}

fn ms(s: u32) -> u64 {
    u64::from(s) * 1000
}

fn model_timeout(state: State) -> u64 {
    match state {
        State::SynSent | State::SynRecv => ms(MT.tcp_syn),
        State::Established => ms(MT.tcp_established),
        State::FinWait | State::TimeWait | State::Closed => ms(MT.tcp_closing),
        State::Udp => ms(MT.udp),
    }
}

/// The TCP rules, written from the module documentation's table.
fn model_tcp(m: &mut M, dir: Dir, flags: u8, now: u64) {
    let d = dir as usize;
    let has = |f: u8| flags & f != 0;
    let handshaking = m.state == State::SynSent || m.state == State::SynRecv;
    let mut refresh = true;
    if m.state == State::Udp {
    } else if m.state == State::Closed {
        refresh = false;
    } else if has(RST) {
        m.state = State::Closed;
    } else if has(SYN) {
        if handshaking && dir == Dir::Reply && has(ACK) {
            m.state = State::SynRecv;
        } else if !(handshaking && dir == Dir::Original && !has(ACK)) {
            refresh = false;
        }
    } else {
        m.seen[d] = true;
        m.fin[d] |= has(FIN);
        if m.fin[0] && m.fin[1] {
            m.state = State::TimeWait;
        } else if m.fin[0] || m.fin[1] {
            m.state = State::FinWait;
        } else if (m.state == State::SynRecv && dir == Dir::Original && has(ACK))
            || (handshaking && m.seen[0] && m.seen[1])
        {
            m.state = State::Established;
        }
    }
    if refresh {
        m.expires = now + model_timeout(m.state);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        orig: u8,
        reply: u8,
        state: State,
        value: u32,
    },
    Lookup(u8),
    /// Any id ever issued, live or stale.
    Remove(usize),
    Advance(u64),
    Expire(usize),
    Touch(usize),
    Tcp(usize, Dir, u8),
}

fn op() -> impl Strategy<Value = Op> {
    let state = prop_oneof![
        Just(State::SynSent),
        Just(State::Established),
        Just(State::Udp),
        Just(State::FinWait),
    ];
    let dir = prop_oneof![Just(Dir::Original), Just(Dir::Reply)];
    let tcp = prop_oneof![
        Just(SYN),
        Just(SYN | ACK),
        Just(ACK),
        Just(PSH | ACK),
        Just(FIN | ACK),
        Just(FIN),
        Just(RST),
        Just(RST | ACK),
        any::<u8>(),
    ];
    prop_oneof![
        4 => (0..48u8, 0..48u8, state, any::<u32>())
            .prop_map(|(orig, reply, state, value)| Op::Insert { orig, reply, state, value }),
        3 => (0..48u8).prop_map(Op::Lookup),
        1 => any::<usize>().prop_map(Op::Remove),
        2 => prop_oneof![0..3_000u64, Just(999), Just(1_000), 0..12_000u64].prop_map(Op::Advance),
        1 => prop_oneof![Just(1usize), Just(2), Just(5), Just(1_000)].prop_map(Op::Expire),
        1 => any::<usize>().prop_map(Op::Touch),
        3 => (any::<usize>(), dir, tcp).prop_map(|(i, d, f)| Op::Tcp(i, d, f)),
    ]
}

/// The model's live ids in a stable order.
fn ids(model: &HashMap<EntryId, M>) -> Vec<EntryId> {
    let mut v: Vec<_> = model.keys().copied().collect();
    v.sort();
    v
}

fn holder(model: &HashMap<EntryId, M>, k: &FlowKey) -> Option<(EntryId, Dir)> {
    model.iter().find_map(|(&id, m)| {
        if m.keys[0] == *k {
            Some((id, Dir::Original))
        } else if m.keys[1] == *k {
            Some((id, Dir::Reply))
        } else {
            None
        }
    })
}

fn compare(ct: &Conntrack<u32>, model: &HashMap<EntryId, M>, now: u64) {
    ct.check();
    assert_eq!(ct.len(), model.len());
    assert_eq!(ct.is_full(), model.len() == ct.capacity());
    for (&id, m) in model {
        assert!(ct.is_live(id));
        let e = ct.get(id);
        let got = M {
            keys: [*e.orig(), *e.reply()],
            value: e.value,
            state: e.state(),
            fin: [e.fin_seen(Dir::Original), e.fin_seen(Dir::Reply)],
            seen: m.seen,
            created: e.created_at(),
            expires: e.expires_at(),
        };
        assert_eq!(&got, m, "{id:?}");
    }
    for n in 0..48 {
        let k = key(n);
        let want = holder(model, &k).filter(|(id, _)| now < model[id].expires);
        assert_eq!(ct.lookup(&k, now), want, "lookup {k:?} at {now}");
    }
}

fn run(capacity: usize, ops: &[Op]) {
    let mut ct = seeded::<u32>(capacity, MT);
    let mut model: HashMap<EntryId, M> = HashMap::new();
    let mut issued: Vec<EntryId> = Vec::new();
    let mut now = 1_000u64;
    for op in ops {
        match *op {
            Op::Insert {
                orig,
                reply,
                state,
                value,
            } => {
                let (o, r) = (key(orig), key(reply));
                let ho = holder(&model, &o);
                let hr = holder(&model, &r);
                let live = |h: Option<(EntryId, Dir)>| h.filter(|(id, _)| now < model[id].expires);
                let want = if o == r {
                    Err(InsertError::SameKeys)
                } else if let Some((id, _)) = live(ho) {
                    Err(InsertError::OrigInUse(id))
                } else if let Some((id, _)) = live(hr) {
                    Err(InsertError::ReplyInUse(id))
                } else if ho.is_none() && hr.is_none() && model.len() == capacity {
                    Err(InsertError::Full)
                } else {
                    Ok(())
                };
                let mut freed = Vec::new();
                let got = ct.insert(o, r, value, state, now, |_, e| {
                    freed.push((*e.orig(), e.value))
                });
                match (want, got) {
                    (Err(w), g) => {
                        assert_eq!(g, Err(w));
                        assert!(freed.is_empty(), "an error changes nothing");
                    }
                    (Ok(()), Err(g)) => panic!("insert refused: {g:?}"),
                    (Ok(()), Ok(id)) => {
                        let mut want_freed: Vec<_> =
                            [ho, hr].into_iter().flatten().map(|(id, _)| id).collect();
                        want_freed.sort();
                        want_freed.dedup();
                        let mut want_freed: Vec<_> = want_freed
                            .into_iter()
                            .map(|id| {
                                let m = model.remove(&id).unwrap();
                                (m.keys[0], m.value)
                            })
                            .collect();
                        want_freed.sort();
                        freed.sort();
                        assert_eq!(freed, want_freed);
                        assert!(!model.contains_key(&id), "id {id:?} handed out twice");
                        model.insert(
                            id,
                            M {
                                keys: [o, r],
                                value,
                                state,
                                fin: [false; 2],
                                seen: [false; 2],
                                created: now,
                                expires: now + model_timeout(state),
                            },
                        );
                        issued.push(id);
                    }
                }
            }
            Op::Lookup(n) => {
                let k = key(n);
                let want = holder(&model, &k).filter(|(id, _)| now < model[id].expires);
                assert_eq!(ct.lookup(&k, now), want);
            }
            Op::Remove(i) => {
                if issued.is_empty() {
                    continue;
                }
                let id = issued[i % issued.len()];
                let got = ct.remove(id).map(|e| (*e.orig(), e.value));
                let want = model.remove(&id).map(|m| (m.keys[0], m.value));
                assert_eq!(got, want);
            }
            Op::Advance(d) => now += d,
            Op::Expire(budget) => {
                let mut freed = Vec::new();
                let n = ct.expire(now, budget, |_, e| freed.push((*e.orig(), e.value)));
                assert_eq!(n, freed.len());
                assert!(n <= budget);
                for (o, v) in freed {
                    let (id, _) = holder(&model, &o).expect("freed an entry the model has");
                    let m = model.remove(&id).unwrap();
                    assert_eq!((m.keys[0], m.value), (o, v));
                    assert!(m.expires <= now, "freed a live entry");
                }
                if budget >= capacity {
                    assert!(
                        model.values().all(|m| now < m.expires),
                        "full sweep left an expired entry"
                    );
                }
            }
            Op::Touch(i) | Op::Tcp(i, ..) => {
                let live = ids(&model);
                if live.is_empty() {
                    continue;
                }
                let id = live[i % live.len()];
                let m = model.get_mut(&id).unwrap();
                match *op {
                    Op::Touch(_) => {
                        ct.touch(id, now);
                        if m.state != State::Closed {
                            m.expires = now + model_timeout(m.state);
                        }
                    }
                    Op::Tcp(_, dir, flags) => {
                        // A RST at the expected number where one is known
                        // (the window checks have their own tests): a
                        // refused one changes nothing.
                        let seg = exact_seg(&ct, id, dir, flags);
                        match ct.update_tcp(id, dir, &seg, now) {
                            Ok(got) => {
                                model_tcp(m, dir, flags, now);
                                assert_eq!(got, m.state, "{flags:#04x} {dir:?}");
                            }
                            // A RST off the mark, or a client segment in
                            // SynRecv that acknowledges no SYN the entry saw
                            // (the model inserts entries in SynRecv too).
                            Err(_) => assert!(
                                (flags & RST != 0
                                    && !matches!(m.state, State::Udp | State::Closed))
                                    || (m.state == State::SynRecv
                                        && dir == Dir::Original
                                        && flags & (SYN | RST) == 0),
                                "{flags:#04x} {dir:?} refused in {:?}",
                                m.state
                            ),
                        }
                    }
                    _ => unreachable!(),
                }
            }
        }
        compare(&ct, &model, now);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn model_small_tables(capacity in 1usize..8, ops in proptest::collection::vec(op(), 1..200)) {
        run(capacity, &ops);
    }

    #[test]
    fn model_roomy_tables(capacity in 8usize..64, ops in proptest::collection::vec(op(), 1..300)) {
        run(capacity, &ops);
    }

    #[test]
    fn tcp_step_never_touches_the_live_bit(
        state in 0u8..6,
        bits in any::<u8>(),
        dir in prop_oneof![Just(Dir::Original), Just(Dir::Reply)],
        flags in any::<u8>(),
    ) {
        let states = [State::SynSent, State::SynRecv, State::Established, State::FinWait, State::TimeWait, State::Closed];
        let (_, out, _) = tcp_step(states[state as usize], bits, dir, flags);
        prop_assert_eq!(out & LIVE, bits & LIVE);
    }
}

#[test]
fn deadlines_moved_earlier_are_swept_in_time() {
    // An established entry (900 s) that sees FINs both ways drops to the
    // closing timeout (10 s): the sweep must find it by the earlier time,
    // though its hint was set for the later one.
    let cap = 64;
    let mut ct = seeded::<u32>(cap, T);
    let mut ids = Vec::new();
    for i in 0..cap as u16 {
        let id = ct
            .insert(
                client(i),
                fullnat_reply(i),
                u32::from(i),
                State::SynSent,
                0,
                none,
            )
            .unwrap();
        tcp(&mut ct, id, Dir::Reply, SYN | ACK, 1);
        tcp(&mut ct, id, Dir::Original, ACK, 2);
        assert_eq!(ct.get(id).state(), State::Established);
        ids.push(id);
    }
    ct.check();
    // Plain segments push the deadline out without touching the hints.
    for &id in &ids {
        tcp(&mut ct, id, Dir::Original, ACK | PSH, 1_000);
        tcp(&mut ct, id, Dir::Reply, ACK, 1_000);
    }
    ct.check();
    // Every other connection closes at 2 s.
    for &id in ids.iter().step_by(2) {
        tcp(&mut ct, id, Dir::Original, FIN | ACK, 2_000);
        tcp(&mut ct, id, Dir::Reply, FIN | ACK, 2_000);
        assert_eq!(ct.get(id).state(), State::TimeWait);
        assert_eq!(ct.get(id).expires_at(), 12_000);
    }
    ct.check();
    assert_eq!(ct.expire(11_999, cap, none), 0);
    assert_eq!(
        ct.expire(12_000, cap, none),
        cap / 2,
        "closed ones at their deadline"
    );
    ct.check();
    assert_eq!(ct.expire(900_999, cap, none), 0);
    assert_eq!(ct.expire(901_000, cap, none), cap / 2, "the rest at theirs");
    assert!(ct.is_empty());
    ct.check();
}

/// A hint from `prefetch_entry` gives the lookup's answer, also once it
/// went stale: its entry removed, expired, or its slot reused by another
/// flow (or by the same key in the other direction).
#[test]
fn hinted_lookups_are_lookups() {
    let mut ct: Conntrack<u32> = seeded(8, T);
    let (a, ra) = (client(1000), fullnat_reply(5000));
    let id = ct.insert(a, ra, 1, State::Established, 0, none).unwrap();
    let hint_a = ct.prefetch_entry(ct.hash_of(&a));
    let hint_ra = ct.prefetch_entry(ct.hash_of(&ra));
    assert_ne!(hint_a, Hint::default());
    let same = |ct: &Conntrack<u32>, k: &FlowKey, h: Hint, now: u64| {
        let want = ct.lookup(k, now);
        assert_eq!(
            ct.lookup_hinted(k, ct.hash_of(k), h, now),
            want,
            "{k:?} at {now}"
        );
        want
    };
    assert_eq!(same(&ct, &a, hint_a, 1), Some((id, Dir::Original)));
    assert_eq!(same(&ct, &ra, hint_ra, 1), Some((id, Dir::Reply)));
    // A hint of another key, and no hint.
    assert_eq!(same(&ct, &a, hint_ra, 1), Some((id, Dir::Original)));
    assert_eq!(same(&ct, &a, Hint::default(), 1), Some((id, Dir::Original)));
    // Expired, not reclaimed.
    let late = ct.get(id).expires_at();
    assert_eq!(same(&ct, &a, hint_a, late), None);
    // Removed; the slot reused by another flow, then by a's keys swapped.
    ct.remove(id).unwrap();
    assert_eq!(same(&ct, &a, hint_a, 1), None);
    let (b, rb) = (client(1001), fullnat_reply(5001));
    let id_b = ct.insert(b, rb, 2, State::Established, 1, none).unwrap();
    assert_eq!(id_b, id, "the freed slot is reused");
    assert_eq!(same(&ct, &a, hint_a, 2), None);
    assert_eq!(same(&ct, &b, hint_a, 2), Some((id_b, Dir::Original)));
    ct.remove(id_b).unwrap();
    let id_c = ct.insert(ra, a, 3, State::Established, 2, none).unwrap();
    assert_eq!(id_c, id);
    assert_eq!(same(&ct, &a, hint_a, 3), Some((id_c, Dir::Reply)));
    assert_eq!(same(&ct, &ra, hint_ra, 3), Some((id_c, Dir::Original)));
    ct.check();
}

proptest! {
    /// `open_tcp` on a flow's first segment leaves the entry exactly as
    /// `update_tcp` does, whatever the segment (a SYN takes the short way,
    /// anything else `update_tcp` itself).
    #[test]
    fn open_tcp_is_update_tcp_on_a_new_entry(
        flags in prop::sample::select(vec![SYN, SYN | ACK, SYN | FIN, ACK, FIN | ACK, PSH | ACK, RST, SYN | RST]),
        seq in any::<u32>(),
        ack in any::<u32>(),
        win in any::<u16>(),
        len in 0u32..2000,
        wscale in prop::sample::select(vec![0u8, 7, 14, 15, 200, window::NO_WSCALE]),
        state in prop::sample::select(vec![State::SynSent, State::Udp]),
        now in 0u64..1_000_000,
    ) {
        let seg = TcpSeg { flags, seq, ack, win, len, wscale };
        let mut a: Conntrack<u32> = seeded(4, T);
        let mut b: Conntrack<u32> = seeded(4, T);
        let ia = a.insert(client(1), fullnat_reply(1), 7, state, now, none).unwrap();
        let ib = b.insert(client(1), fullnat_reply(1), 7, state, now, none).unwrap();
        let ra = a.update_tcp(ia, Dir::Original, &seg, now);
        let rb = b.open_tcp(ib, &seg, now);
        prop_assert_eq!(ra, rb);
        let (ea, eb) = (a.get(ia), b.get(ib));
        prop_assert_eq!(ea.state(), eb.state());
        prop_assert_eq!(ea.expires_at(), eb.expires_at());
        prop_assert_eq!(ea.tcp(), eb.tcp());
        prop_assert_eq!(ea.flags, eb.flags);
        prop_assert_eq!(a.half_open_len(), b.half_open_len());
    }
}

/// `insert_keys` with the caller's hashes finds and reclaims what
/// `insert` does: an expired holder of the original key goes (and is
/// passed to `on_free`), a live one refuses; a reply key the caller
/// vouches for is not looked up again.
#[test]
fn insert_keys_reclaims_and_refuses_as_insert() {
    let mut ct: Conntrack<u32> = seeded(4, T);
    let old = ct
        .insert(client(1), fullnat_reply(1), 1, State::SynSent, 0, none)
        .unwrap();
    let keys = |ct: &Conntrack<u32>, reply: FlowKey| NewKeys {
        orig: client(1),
        orig_hash: ct.hash_of(&client(1)),
        reply,
        reply_hash: ct.hash_of(&reply),
        reply_unheld: true,
    };
    // Live holder of the original key.
    let k = keys(&ct, fullnat_reply(2));
    assert_eq!(
        ct.insert_keys(&k, 2, State::SynSent, 1_000, none),
        Err(InsertError::OrigInUse(old))
    );
    // Expired (tcp_syn is 30 s): reclaimed for the new entry.
    let mut freed = Vec::new();
    let id = ct
        .insert_keys(&k, 3, State::SynSent, 31_000, |id, e| {
            freed.push((id, e.value))
        })
        .unwrap();
    assert_eq!(freed, vec![(old, 1)]);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.lookup(&client(1), 31_000), Some((id, Dir::Original)));
    assert_eq!(ct.lookup(&fullnat_reply(2), 31_000), Some((id, Dir::Reply)));
    assert_eq!(ct.lookup(&fullnat_reply(1), 31_000), None);
    assert_eq!(
        ct.holder_hashed(&fullnat_reply(2), ct.hash_of(&fullnat_reply(2))),
        Some(id)
    );
    // The entry went into the freed slot, written in place: nothing of
    // the old one shows through.
    let e = ct.get(id);
    assert_eq!(
        (e.value, e.created_at(), e.state()),
        (3, 31_000, State::SynSent)
    );
    assert_eq!(e.tcp(), &TcpTrack::NEW);
    ct.check();
}

// ---------------------------------------------------------------------------
// The index on its own, with chosen hashes: tags that collide, buckets
// that fill and overflow (also past the last bucket), deletes.

/// The position and reference `find` gives for `r` under `h`.
fn index_find(ix: &Index, h: u32, r: u32) -> Option<(At, u32)> {
    ix.find(h, |x| x == r)
}

fn index_remove(ix: &mut Index, h: u32, r: u32) {
    let (at, _) = index_find(ix, h, r).expect("present");
    ix.remove_at(h, at);
}

/// Forty keys of one hash (one home, one tag: every compare a tag
/// collision) fill their home bucket and the next, and overflow into a
/// third; each is found, a missing key of the hash is compared with all
/// forty and then missed; deleting them brings every count back to 0,
/// and the freed room of the home bucket is used again first.
#[test]
fn index_full_buckets_overflow_and_deletes_undo_it() {
    let mut ix = Index::new(64);
    assert_eq!(ix.buckets.len(), 16);
    let h = 0x8000_0000;
    let home = ix.home(h);
    for r in 0..40 {
        ix.insert(h, r);
    }
    ix.check(|_| h);
    assert_eq!(ix.buckets[home].overflow, 25);
    assert_eq!(ix.buckets[home + 1].overflow, 10);
    assert_eq!(ix.buckets[home + 2].overflow, 0);
    assert_eq!(
        ix.buckets[home + 2]
            .words
            .iter()
            .filter(|&&w| w != 0)
            .count(),
        10
    );
    for r in 0..40 {
        assert_eq!(index_find(&ix, h, r).map(|(_, x)| x), Some(r));
    }
    let mut compared = 0;
    assert_eq!(
        ix.find(h, |_| {
            compared += 1;
            false
        }),
        None
    );
    assert_eq!(compared, 40, "every key of the tag, in three buckets");
    // Deleting a home-bucket key leaves the others' counts alone; its
    // room takes the next key of the hash.
    index_remove(&mut ix, h, 3);
    ix.check(|_| h);
    assert_eq!(ix.buckets[home].overflow, 25);
    ix.insert(h, 40);
    assert_eq!(index_find(&ix, h, 40).map(|(at, _)| at.bucket), Some(home));
    ix.check(|_| h);
    for r in (0..41).filter(|&r| r != 3) {
        index_remove(&mut ix, h, r);
        ix.check(|_| h);
        assert_eq!(index_find(&ix, h, r), None);
    }
    assert!(ix
        .buckets
        .iter()
        .all(|b| b.overflow == 0 && b.words.iter().all(|&w| w == 0)));
}

/// A full last bucket overflows into the first.
#[test]
fn index_overflow_wraps_past_the_last_bucket() {
    let mut ix = Index::new(16);
    let last = ix.buckets.len() - 1;
    let h = u32::MAX;
    assert_eq!(ix.home(h), last);
    for r in 0..20 {
        ix.insert(h, r);
    }
    ix.check(|_| h);
    assert_eq!(ix.buckets[last].overflow, 5);
    assert_eq!(index_find(&ix, h, 19).map(|(at, _)| at.bucket), Some(0));
    for r in 0..15 {
        index_remove(&mut ix, h, r);
    }
    ix.check(|_| h);
    assert_eq!(
        ix.buckets[last].overflow, 5,
        "the wrapped keys stay counted"
    );
    for r in 15..20 {
        assert_eq!(index_find(&ix, h, r).map(|(_, x)| x), Some(r));
        index_remove(&mut ix, h, r);
    }
    assert_eq!(ix.buckets[last].overflow, 0);
}

/// Keys of one home bucket but different tags are never compared with
/// each other's entries.
#[test]
fn index_tags_keep_other_keys_of_a_bucket_out() {
    let mut ix = Index::new(64);
    let (a, b) = (0x8000_0000, 0x8000_0001);
    assert_eq!(ix.home(a), ix.home(b));
    assert_ne!(ix.tag(a), ix.tag(b));
    for r in 0..7 {
        ix.insert(if r % 2 == 0 { a } else { b }, r);
    }
    let mut seen = Vec::new();
    assert_eq!(
        ix.find(a, |x| {
            seen.push(x);
            false
        }),
        None
    );
    assert_eq!(seen, vec![0, 2, 4, 6]);
    assert_eq!(index_find(&ix, b, 5).map(|(_, x)| x), Some(5));
    assert_eq!(index_find(&ix, b, 4), None, "a's key under b's tag");
}

/// Tags take the bits the references leave: 14 at 100k entries, 11 at
/// a million, none at the largest capacity, where every word of a bucket
/// is a candidate (slower, still right).
#[test]
fn index_tags_take_the_bits_references_leave() {
    assert_eq!(ref_bits(1), 2);
    assert_eq!(ref_bits(100_000), 18);
    assert_eq!(ref_bits(1_000_000), 21);
    assert_eq!(ref_bits(MAX_CAPACITY), 32);
    let max_ref = index_ref(MAX_CAPACITY - 1, Dir::Reply);
    assert_eq!(u64::from(max_ref) + 1, 2 * MAX_CAPACITY as u64);
    let mut ix = Index::with_buckets(2, 32);
    let (a, b) = (0x1234_5678, 0x1234_5679);
    assert_eq!(ix.tag(a), ix.tag(b));
    ix.insert(a, max_ref);
    ix.insert(b, 7);
    assert_eq!(index_find(&ix, a, max_ref).map(|(_, x)| x), Some(max_ref));
    assert_eq!(index_find(&ix, b, 7).map(|(_, x)| x), Some(7));
    let mut seen = Vec::new();
    let _ = ix.find(a, |x| {
        seen.push(x);
        false
    });
    assert_eq!(seen, vec![max_ref, 7], "no tag: both are candidates");
    ix.check(|r| if r == 7 { b } else { a });
}

#[derive(Clone, Debug)]
enum IxOp {
    Insert(u32),
    Remove(usize),
}

fn ix_op() -> impl Strategy<Value = IxOp> {
    // A few hashes (tag collisions, shared and neighbouring homes, the
    // last bucket) and any.
    let hash = prop_oneof![
        Just(0u32),
        Just(1u32),
        Just(0x8000_0000u32),
        Just(0x8000_0001u32),
        Just(u32::MAX),
        any::<u32>(),
    ];
    prop_oneof![
        3 => hash.prop_map(IxOp::Insert),
        2 => any::<usize>().prop_map(IxOp::Remove),
    ]
}

proptest! {
    /// The index against a map of reference -> hash, with inserts up to
    /// its full load and deletes in any order.
    #[test]
    fn index_is_a_map(capacity in 1usize..40, ops in proptest::collection::vec(ix_op(), 1..300)) {
        let mut ix = Index::new(capacity);
        let mut model: Vec<(u32, u32)> = Vec::new();
        let mut next = 0u32;
        for op in ops {
            match op {
                IxOp::Insert(h) if model.len() < 2 * capacity => {
                    let r = next % (2 * capacity as u32);
                    if model.iter().any(|&(x, _)| x == r) {
                        next += 1;
                        continue;
                    }
                    ix.insert(h, r);
                    model.push((r, h));
                    next += 1;
                }
                IxOp::Insert(_) => {}
                IxOp::Remove(i) if !model.is_empty() => {
                    let (r, h) = model.swap_remove(i % model.len());
                    index_remove(&mut ix, h, r);
                    prop_assert_eq!(index_find(&ix, h, r), None);
                }
                IxOp::Remove(_) => {}
            }
            let hashes: HashMap<u32, u32> = model.iter().copied().collect();
            ix.check(|r| hashes[&r]);
            for &(r, h) in &model {
                prop_assert_eq!(index_find(&ix, h, r).map(|(_, x)| x), Some(r));
            }
        }
    }
}

/// The tag comparison over a whole bucket at once finds exactly the
/// words a comparison word by word finds: their tag, not empty, never the
/// overflow count.
#[test]
fn index_matches_word_by_word() {
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng as u32
    };
    for capacity in [1, 5, 100_000, 1_000_000, MAX_CAPACITY] {
        let ix = Index::with_buckets(1, ref_bits(capacity));
        for _ in 0..2000 {
            let hash = next();
            let tag = ix.tag(hash);
            let mut b = Bucket::default();
            for w in b.words.iter_mut() {
                *w = match next() % 4 {
                    0 => 0,
                    1 => tag | (next() & ix.ref_mask),
                    2 => tag,
                    _ => next(),
                };
            }
            b.overflow = tag | 1;
            let want = b
                .words
                .iter()
                .enumerate()
                .filter(|(_, &w)| w != 0 && w & !ix.ref_mask == tag)
                .fold(0u32, |m, (i, _)| m | 1 << i);
            assert_eq!(ix.matches(&b, tag), want, "{capacity} {:x?}", b.words);
        }
    }
}
