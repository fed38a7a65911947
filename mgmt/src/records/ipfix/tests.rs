use super::*;
use conf::records::{ConnRecord, REC_FULL_NAT};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn mapped(a: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xff;
    m[11] = 0xff;
    m[12..].copy_from_slice(&a);
    m
}

fn v4_record() -> Record {
    Record {
        conn: ConnRecord {
            start_ms: 1,
            end_ms: 2,
            conn_id: 0x0102_0304_0506_0708,
            packets: [5, 4],
            octets: [300, 200],
            client: mapped([192, 0, 2, 1]),
            vip: mapped([198, 51, 100, 10]),
            backend: mapped([10, 0, 1, 1]),
            local: mapped([10, 0, 0, 2]),
            client_port: 40000,
            vip_port: 80,
            backend_port: 8080,
            local_port: 1025,
            proto: 6,
            client_v6: false,
            backend_v6: false,
            end: EndReason::Fin,
            flags: REC_FULL_NAT,
            worker: 0,
        },
        start_unix_ms: 1_764_633_600_000,
        end_unix_ms: 1_764_633_600_250,
    }
}

fn v6_record() -> Record {
    let mut r = v4_record();
    r.conn.client = "2001:db8::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    r.conn.vip = "2001:db8::10"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    r.conn.backend = "2001:db8:1::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    r.conn.local = "2001:db8::2"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    r.conn.client_v6 = true;
    r.conn.backend_v6 = true;
    r
}

#[test]
fn the_template_message_holds_both_templates_of_standard_and_reverse_elements() {
    let msg = Encoder::new(7).templates(0x6000_0000);
    let v4_fields = "
        0098 0008  0099 0008  0008 0004  000c 0004  0007 0002  000b 0002  0004 0001
        00e1 0004  00e2 0004  00e3 0002  00e4 0002
        0002 0008  0001 0008  8002 0008 00007279  8001 0008 00007279
        0088 0001  0094 0008";
    let v6_fields = "
        0098 0008  0099 0008  001b 0010  001c 0010  0007 0002  000b 0002  0004 0001
        0119 0010  011a 0010  00e3 0002  00e4 0002
        0002 0008  0001 0008  8002 0008 00007279  8001 0008 00007279
        0088 0001  0094 0008";
    let want = hex(&format!(
        "000a 00b4 60000000 00000000 00000007
         0002 00a4
         0100 0011 {v4_fields}
         0101 0011 {v6_fields}"
    ));
    assert_eq!(msg, want);
}

#[test]
fn a_data_record_carries_the_client_flow_and_its_backend_translation() {
    let mut enc = Encoder::new(7);
    let msgs = enc.data(&[v4_record()], 0x6000_0000);
    let want = hex("000a 0066 60000000 00000000 00000007
         0100 0056
         0000019adc5be000 0000019adc5be0fa
         c0000201 c633640a 9c40 0050 06
         0a000002 0a000101 0401 1f90
         0000000000000005 000000000000012c 0000000000000004 00000000000000c8
         03 0102030405060708");
    assert_eq!(msgs, vec![(want, 1)]);
    assert_eq!(enc.sequence(), 1);
}

#[test]
fn an_ipv6_record_uses_the_ipv6_template_with_16_byte_addresses() {
    let mut enc = Encoder::new(1);
    let msgs = enc.data(&[v6_record()], 0);
    let (msg, n) = &msgs[0];
    assert_eq!(*n, 1);
    assert_eq!(msg.len(), 16 + 4 + 130);
    assert_eq!(&msg[16..20], &hex("0101 0086")[..]);
    let rec = &msg[20..];
    assert_eq!(
        &rec[16..32],
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()
    );
    // post-NAT source (the local address), then destination (the backend)
    assert_eq!(
        &rec[53..69],
        &"2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()
    );
    assert_eq!(
        &rec[69..85],
        &"2001:db8:1::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()
    );
}

/// Splits a message into (set id, set length) pairs, checking lengths add up.
fn sets(msg: &[u8]) -> Vec<(u16, usize)> {
    assert_eq!(u16::from_be_bytes([msg[0], msg[1]]), 10);
    assert_eq!(usize::from(u16::from_be_bytes([msg[2], msg[3]])), msg.len());
    let mut at = HEADER_LEN;
    let mut out = Vec::new();
    while at < msg.len() {
        let id = u16::from_be_bytes([msg[at], msg[at + 1]]);
        let len = usize::from(u16::from_be_bytes([msg[at + 2], msg[at + 3]]));
        assert!(len >= SET_HEADER_LEN && at + len <= msg.len());
        out.push((id, len));
        at += len;
    }
    assert_eq!(at, msg.len());
    out
}

#[test]
fn families_alternate_in_sets_of_one_template_each() {
    let mut enc = Encoder::new(1);
    let msgs = enc.data(&[v4_record(), v4_record(), v6_record(), v4_record()], 0);
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        sets(&msgs[0].0),
        vec![(256, 4 + 2 * 82), (257, 4 + 130), (256, 4 + 82)]
    );
}

#[test]
fn messages_stay_under_the_bound_and_number_records_by_sequence() {
    let mut enc = Encoder::new(1);
    let records: Vec<Record> = (0..100)
        .map(|i| if i % 3 == 0 { v6_record() } else { v4_record() })
        .collect();
    let msgs = enc.data(&records, 0);
    assert!(msgs.len() > 1);
    let mut before = 0u32;
    for (msg, n) in &msgs {
        assert!(msg.len() <= MAX_MESSAGE_LEN, "{} bytes", msg.len());
        sets(msg);
        assert_eq!(u32::from_be_bytes(msg[8..12].try_into().unwrap()), before);
        before += *n as u32;
    }
    assert_eq!(before, 100);
    // The next call continues the count; the template message carries it too.
    let next = enc.data(&[v4_record()], 0);
    assert_eq!(
        u32::from_be_bytes(next[0].0[8..12].try_into().unwrap()),
        100
    );
    assert_eq!(
        u32::from_be_bytes(enc.templates(0)[8..12].try_into().unwrap()),
        101
    );
}

#[test]
fn end_reasons_map_to_iana_flow_end_reasons() {
    assert_eq!(flow_end_reason(EndReason::Timeout), 1);
    assert_eq!(flow_end_reason(EndReason::Fin), 3);
    assert_eq!(flow_end_reason(EndReason::Rst), 3);
    assert_eq!(flow_end_reason(EndReason::Reset), 4);
    assert_eq!(flow_end_reason(EndReason::Evicted), 5);
}

#[test]
fn no_records_no_message() {
    assert!(Encoder::new(1).data(&[], 0).is_empty());
}
