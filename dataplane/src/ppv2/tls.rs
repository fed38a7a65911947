//! The server name (SNI) of a TLS ClientHello, for the PPv2 `AUTHORITY` TLV.
//!
//! Bounds-checked, allocation-free, never panics: every read goes through
//! [`Cursor`], which answers `None` past the end. Only what the first
//! segment holds is looked at; a ClientHello whose server name extension
//! lies beyond it gives `None`.

/// A read position in a byte slice.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (&v, rest) = self.b.split_first()?;
        self.b = rest;
        Some(v)
    }

    fn u16(&mut self) -> Option<u16> {
        let (v, rest) = self.b.split_first_chunk::<2>()?;
        self.b = rest;
        Some(u16::from_be_bytes(*v))
    }

    fn u24(&mut self) -> Option<usize> {
        let (v, rest) = self.b.split_first_chunk::<3>()?;
        self.b = rest;
        Some(usize::from(v[0]) << 16 | usize::from(v[1]) << 8 | usize::from(v[2]))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (v, rest) = self.b.split_at(n);
        self.b = rest;
        Some(v)
    }

    /// Up to `n` bytes: what is there of a field that may run past the data.
    fn take_upto(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.b.len());
        let (v, rest) = self.b.split_at(n);
        self.b = rest;
        v
    }
}

/// A host name as it may appear in SNI: 1 to 255 bytes of letters, digits,
/// `-`, `_` and `.`.
pub fn valid_host_name(n: &[u8]) -> bool {
    (1..=255).contains(&n.len())
        && n.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_')
}

/// The `host_name` of the server name extension of the ClientHello that
/// starts `data` (a TLS record), if `data` holds it.
pub fn client_hello_sni(data: &[u8]) -> Option<&[u8]> {
    let mut rec = Cursor { b: data };
    // TLSPlaintext: handshake(22), legacy_record_version 3.x, length.
    if rec.u8()? != 22 || rec.u8()? != 3 {
        return None;
    }
    let _minor = rec.u8()?;
    let rec_len = usize::from(rec.u16()?);
    let mut hs = Cursor {
        b: rec.take_upto(rec_len),
    };
    // Handshake: client_hello(1), uint24 length.
    if hs.u8()? != 1 {
        return None;
    }
    let hs_len = hs.u24()?;
    let mut ch = Cursor {
        b: hs.take_upto(hs_len),
    };
    ch.take(2)?; // legacy_version
    ch.take(32)?; // random
    let sid = usize::from(ch.u8()?);
    if sid > 32 {
        return None;
    }
    ch.take(sid)?;
    let suites = usize::from(ch.u16()?);
    ch.take(suites)?;
    let comp = usize::from(ch.u8()?);
    ch.take(comp)?;
    let ext_len = usize::from(ch.u16()?);
    let mut exts = Cursor {
        b: ch.take_upto(ext_len),
    };
    loop {
        let kind = exts.u16()?;
        let len = usize::from(exts.u16()?);
        let body = exts.take(len)?;
        if kind != 0 {
            continue;
        }
        // ServerNameList: uint16 length, then (name_type, opaque<1..2^16-1>).
        let mut list = Cursor { b: body };
        let list_len = usize::from(list.u16()?);
        let mut names = Cursor {
            b: list.take(list_len)?,
        };
        while !names.b.is_empty() {
            let name_type = names.u8()?;
            let n = usize::from(names.u16()?);
            let name = names.take(n)?;
            if name_type == 0 {
                return valid_host_name(name).then_some(name);
            }
        }
        return None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello with the given extensions block.
    pub fn hello(exts: &[u8]) -> Vec<u8> {
        let mut ch = vec![3, 3];
        ch.extend_from_slice(&[0xAA; 32]);
        ch.push(0); // session id
        ch.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        ch.extend_from_slice(&[1, 0]); // null compression
        ch.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        ch.extend_from_slice(exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(ch.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&ch);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    pub fn sni_ext(name: &[u8]) -> Vec<u8> {
        let mut e = vec![0, 0];
        let list_len = name.len() + 3;
        e.extend_from_slice(&((list_len + 2) as u16).to_be_bytes());
        e.extend_from_slice(&(list_len as u16).to_be_bytes());
        e.push(0);
        e.extend_from_slice(&(name.len() as u16).to_be_bytes());
        e.extend_from_slice(name);
        e
    }

    #[test]
    fn finds_the_name_after_other_extensions() {
        let mut exts = vec![0x00, 0x0b, 0, 2, 1, 0]; // ec_point_formats
        exts.extend(sni_ext(b"www.example.com"));
        let h = hello(&exts);
        assert_eq!(client_hello_sni(&h), Some(&b"www.example.com"[..]));
    }

    #[test]
    fn every_truncation_and_mutation_is_safe() {
        let h = hello(&sni_ext(b"a.example"));
        for n in 0..h.len() {
            let r = client_hello_sni(&h[..n]);
            assert!(r.is_none() || r == Some(&b"a.example"[..]));
        }
        for i in 0..h.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = h.clone();
                m[i] = v;
                let _ = client_hello_sni(&m);
            }
        }
    }

    #[test]
    fn refuses_non_hellos_and_bad_names() {
        assert_eq!(client_hello_sni(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(client_hello_sni(&hello(&[])), None);
        assert_eq!(client_hello_sni(&hello(&sni_ext(b"bad name"))), None);
        assert_eq!(client_hello_sni(&hello(&sni_ext(b""))), None);
    }
}
