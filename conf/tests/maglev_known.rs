//! Known answers for the Maglev ring. The expected values come from an
//! independent implementation of the algorithm as documented in
//! `conf::maglev` (and of SipHash-2-4, checked against the reference
//! vectors). Every appliance must compute the same ring from the same config,
//! across versions: if one of these changes, rings change on upgrade.

use conf::flowhash::siphash24;
use conf::maglev::{build, BackendId, MaglevBackend, DEFAULT_M};

fn backends(list: &[(&str, u32)]) -> Vec<MaglevBackend> {
    list.iter()
        .map(|&(s, weight)| MaglevBackend {
            id: BackendId::from_socket_addr(s.parse().unwrap()),
            weight,
        })
        .collect()
}

fn fingerprint(table: &[u32]) -> u64 {
    let bytes: Vec<u8> = table.iter().flat_map(|x| x.to_le_bytes()).collect();
    siphash24(&[0; 16], &bytes)
}

fn counts(table: &[u32], n: usize) -> Vec<usize> {
    let mut c = vec![0; n];
    for &i in table {
        c[i as usize] += 1;
    }
    c
}

#[test]
fn offset_and_skip_known_answers() {
    let a = BackendId::from_socket_addr("10.0.0.1:80".parse().unwrap());
    let b = BackendId::from_socket_addr("10.0.0.2:8080".parse().unwrap());
    assert_eq!(a.offset_skip(65537), (43281, 41356));
    assert_eq!(b.offset_skip(65537), (58584, 28151));
}

#[test]
fn equal_weights_known_ring() {
    let list: Vec<String> = (1..=10).map(|i| format!("10.0.0.{i}:80")).collect();
    let list: Vec<(&str, u32)> = list.iter().map(|s| (s.as_str(), 1)).collect();
    let b = backends(&list);
    let t = build(&b, DEFAULT_M).unwrap();
    assert_eq!(&t[..16], &[7, 8, 6, 2, 5, 3, 3, 3, 3, 8, 1, 9, 6, 2, 8, 7]);
    assert_eq!(
        counts(&t, b.len()),
        [6554, 6554, 6554, 6554, 6554, 6554, 6554, 6553, 6553, 6553]
    );
    assert_eq!(fingerprint(&t), 0x590c78674f433a23);
}

#[test]
fn weighted_known_ring() {
    let b = backends(&[
        ("10.0.0.1:80", 1),
        ("10.0.0.2:80", 2),
        ("[2001:db8::7]:443", 3),
        ("192.0.2.1:8080", 0),
        ("10.0.0.3:80", 10),
        ("10.0.0.4:81", 7),
    ]);
    let t = build(&b, DEFAULT_M).unwrap();
    assert_eq!(&t[..16], &[5, 4, 2, 4, 4, 0, 5, 2, 4, 4, 1, 4, 5, 4, 5, 5]);
    assert_eq!(counts(&t, b.len()), [2850, 5699, 8548, 0, 28494, 19946]);
    assert_eq!(fingerprint(&t), 0x4f8756f50ea39936);
}

#[test]
fn small_known_ring() {
    let b = backends(&[("10.0.0.3:80", 3), ("10.0.0.1:80", 1), ("10.0.0.2:80", 2)]);
    let t = build(&b, 13).unwrap();
    assert_eq!(t, [2, 2, 2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0]);
    assert_eq!(fingerprint(&t), 0x6135542858b26701);
}

/// Many distinct quotas next to one dominant backend: the build takes its
/// min-heap turn order here (the other known rings take the round scan).
#[test]
fn many_distinct_weights_known_ring() {
    let list: Vec<(String, u32)> = (1..=30)
        .map(|w| (format!("10.3.0.{w}:80"), w))
        .chain([("10.3.1.1:80".to_string(), 2000)])
        .collect();
    let list: Vec<(&str, u32)> = list.iter().map(|(s, w)| (s.as_str(), *w)).collect();
    let b = backends(&list);
    let t = build(&b, 4099).unwrap();
    assert_eq!(
        &t[..16],
        &[30, 30, 15, 30, 30, 30, 30, 6, 30, 30, 30, 30, 17, 30, 26, 30]
    );
    assert_eq!(
        counts(&t, b.len()),
        [
            2, 3, 5, 7, 8, 10, 12, 13, 15, 17, 18, 20, 22, 23, 25, 27, 28, 30, 32, 33, 35, 37, 38,
            40, 41, 43, 45, 46, 48, 50, 3326
        ]
    );
    assert_eq!(fingerprint(&t), 0xb34771793c823f7b);
}
