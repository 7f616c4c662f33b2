//! Just enough DER to read who a client certificate names: the subject's Common Name and
//! Organizations (`x509.Certificate.Subject` in Go, which kube-apiserver reads). Pure; the
//! certificate's signature and dates are rustls' business, checked before this runs.

/// OID 2.5.4.3 (commonName), DER contents.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// OID 2.5.4.10 (organizationName).
const ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

/// `(tag, contents, rest)` of the first TLV in `input`.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject of a DER certificate: its Common Name (the user, `None` when it has none) and
/// every Organization (the groups), in order. `None` when the DER cannot be read.
pub fn subject_identity(cert: &[u8]) -> Option<(Option<String>, Vec<String>)> {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    let (SEQUENCE, certificate, _) = tlv(cert)? else { return None };
    let (SEQUENCE, mut tbs, _) = tlv(certificate)? else { return None };
    // [0] version, when present.
    if tbs.first() == Some(&0xa0) {
        tbs = tlv(tbs)?.2;
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        tbs = tlv(tbs)?.2;
    }
    let (SEQUENCE, mut rdns, _) = tlv(tbs)? else { return None };
    let (mut user, mut groups) = (None, Vec::new());
    while !rdns.is_empty() {
        let (SET, mut set, rest) = tlv(rdns)? else { return None };
        rdns = rest;
        while !set.is_empty() {
            let (SEQUENCE, attribute, rest) = tlv(set)? else { return None };
            set = rest;
            let (0x06, oid, value) = tlv(attribute)? else { return None };
            // UTF8String, PrintableString, IA5String, T61String: text as it is.
            let (_, text, _) = tlv(value)?;
            let text = String::from_utf8_lossy(text).into_owned();
            if oid == COMMON_NAME {
                user = Some(text);
            } else if oid == ORGANIZATION {
                groups.push(text);
            }
        }
    }
    Some((user, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_and_truncation() {
        assert_eq!(tlv(&[0x04, 0x02, 1, 2, 9]), Some((0x04, &[1u8, 2][..], &[9u8][..])));
        let mut long = vec![0x04, 0x81, 200];
        long.extend([7u8; 200]);
        assert_eq!(tlv(&long).map(|(_, c, _)| c.len()), Some(200));
        assert_eq!(tlv(&[0x04, 0x05, 1]), None);
        assert_eq!(tlv(&[0x04, 0x80]), None);
        assert_eq!(subject_identity(b"not a certificate"), None);
        assert_eq!(subject_identity(&[]), None);
    }
}
