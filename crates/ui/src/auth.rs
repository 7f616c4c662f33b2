//! Who may ask: the token a request carries (header, bearer, and for GET/HEAD the `token` query
//! parameter or the cookie), compared in constant time, and the cookie a GET authorised by the
//! query parameter gets. The cookie is named after the server's port: browsers scope cookies by
//! host, not port, so two dashboards on one machine would otherwise overwrite each other's.
//! Pure: no IO (checked by `cargo xtask tidy`).

use http::{HeaderMap, Method, header};

/// The start of the cookie's name that carries the token after the first visit (the port
/// follows).
pub(crate) const COOKIE_PREFIX: &str = "theseus_ui_token_";

/// The header pages and scripts send the token in.
pub(crate) const TOKEN_HEADER: &str = "x-theseus-token";

/// What a request without the token is told.
pub(crate) const DENIED: &str = "theseus ui: this needs the token that `theseus ui` printed; open the URL it printed";

/// The token and the name of the cookie that carries it.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    /// The token `theseus ui` printed.
    pub(crate) token: String,
    /// `theseus_ui_token_<port>`.
    pub(crate) cookie: String,
}

impl Key {
    /// The key of a server listening on `port`.
    pub(crate) fn new(token: String, port: u16) -> Key {
        Key { token, cookie: format!("{COOKIE_PREFIX}{port}") }
    }
}

/// How a request proved it has the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// `X-Theseus-Token` or `Authorization: Bearer`.
    Header,
    /// The `token` query parameter (GET/HEAD only): the answer sets the cookie.
    Query,
    /// The cookie (GET/HEAD only).
    Cookie,
}

/// How the request is authorised, if at all. `query_token` is the decoded `token` query
/// parameter. POST (and every method but GET/HEAD) counts headers only, so that a cross-site
/// form, which can send neither, cannot act.
pub(crate) fn authorise(method: &Method, headers: &HeaderMap, query_token: Option<&str>, key: &Key) -> Option<Grant> {
    let matches = |candidate: &[u8]| same(candidate, key.token.as_bytes());
    let by_header = headers.get_all(TOKEN_HEADER).iter().any(|v| matches(v.as_bytes()))
        || headers.get_all(header::AUTHORIZATION).iter().any(|v| bearer(v.as_bytes()).is_some_and(matches));
    if by_header {
        return Some(Grant::Header);
    }
    if *method != Method::GET && *method != Method::HEAD {
        return None;
    }
    if query_token.is_some_and(|q| matches(q.as_bytes())) {
        return Some(Grant::Query);
    }
    let by_cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .filter_map(|pair| {
            let at = pair.iter().position(|&b| b == b'=')?;
            (pair[..at].trim_ascii() == key.cookie.as_bytes()).then(|| pair[at + 1..].trim_ascii())
        })
        .any(matches);
    by_cookie.then_some(Grant::Cookie)
}

/// The `Set-Cookie` value that lets the page's own requests (assets, `EventSource`) in.
/// `SameSite=Lax`, not `Strict`: a `/runs/ID` link followed from mail or chat then opens, and
/// nothing is lost by it, since no GET changes anything and every action (POST) needs the
/// header, which a cross-site page cannot send (the server allows no CORS preflight).
pub(crate) fn set_cookie(key: &Key) -> String {
    format!("{}={}; HttpOnly; SameSite=Lax; Path=/", key.cookie, key.token)
}

/// The credentials of `Authorization: Bearer CREDENTIALS` (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    let rest = rest.strip_prefix(b" ")?;
    scheme.eq_ignore_ascii_case(b"bearer").then(|| rest.trim_ascii())
}

/// Whether `a == b`, in time that depends on their lengths only (the token's length is not a
/// secret: it is always 48 hex digits).
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";
    const COOKIE: &str = "theseus_ui_token_8765";

    fn key() -> Key {
        Key::new(T.to_owned(), 8765)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn headers_authorise_every_method() {
        for method in [Method::GET, Method::POST, Method::HEAD, Method::DELETE] {
            assert_eq!(authorise(&method, &headers(&[("x-theseus-token", T)]), None, &key()), Some(Grant::Header));
            let bearer = format!("Bearer {T}");
            assert_eq!(authorise(&method, &headers(&[("authorization", &bearer)]), None, &key()), Some(Grant::Header));
            let bearer = format!("bearer  {T} ");
            assert_eq!(authorise(&method, &headers(&[("authorization", &bearer)]), None, &key()), Some(Grant::Header));
        }
        let basic = format!("Basic {T}");
        assert_eq!(authorise(&Method::GET, &headers(&[("authorization", &basic)]), None, &key()), None);
    }

    #[test]
    fn query_and_cookie_only_for_get_and_head() {
        let cookie = format!("a=b; {COOKIE}={T}; c=d");
        for method in [Method::GET, Method::HEAD] {
            assert_eq!(authorise(&method, &HeaderMap::new(), Some(T), &key()), Some(Grant::Query));
            assert_eq!(authorise(&method, &headers(&[("cookie", &cookie)]), None, &key()), Some(Grant::Cookie));
        }
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
            assert_eq!(authorise(&method, &HeaderMap::new(), Some(T), &key()), None);
            assert_eq!(authorise(&method, &headers(&[("cookie", &cookie)]), Some(T), &key()), None);
        }
    }

    #[test]
    fn wrong_tokens_are_refused() {
        let wrong = format!("{}0", &T[..47]);
        assert_eq!(wrong.len(), T.len());
        assert_eq!(authorise(&Method::GET, &headers(&[("x-theseus-token", &wrong)]), Some(&wrong), &key()), None);
        assert_eq!(authorise(&Method::GET, &headers(&[("x-theseus-token", &T[..47])]), None, &key()), None);
        assert_eq!(authorise(&Method::GET, &headers(&[("x-theseus-token", "")]), Some(""), &key()), None);
        // A cookie of another name carrying the token, or a name that only ends like ours.
        let other = format!("other={T}; x{COOKIE}={T}");
        assert_eq!(authorise(&Method::GET, &headers(&[("cookie", &other)]), None, &key()), None);
        // Another port's cookie (another dashboard on the same machine) is not ours.
        let other_port = format!("theseus_ui_token_8766={T}; theseus_ui_token={T}");
        assert_eq!(authorise(&Method::GET, &headers(&[("cookie", &other_port)]), None, &key()), None);
        // A wrong header does not hide a right cookie.
        let cookie = format!("{COOKIE}={T}");
        let both = headers(&[("x-theseus-token", &wrong), ("cookie", &cookie)]);
        assert_eq!(authorise(&Method::GET, &both, None, &key()), Some(Grant::Cookie));
    }

    #[test]
    fn cookie_is_http_only_and_lax() {
        assert_eq!(
            set_cookie(&Key::new("abc".into(), 8766)),
            "theseus_ui_token_8766=abc; HttpOnly; SameSite=Lax; Path=/"
        );
    }

    #[test]
    fn same_compares_whole_values() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(same(b"", b""));
    }
}
