//! The pages, built into the binary (`assets/`): the one-page app's `index.html` with the token
//! filled in, its script, style sheet and icon.
//! Pure: no IO (checked by `cargo xtask tidy`).

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const FAVICON: &str = include_str!("../assets/favicon.svg");

/// Where `index.html` takes the token.
const TOKEN_PLACEHOLDER: &str = "{{TOKEN}}";

/// A file under `/assets/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asset {
    /// `app.js`.
    Script,
    /// `app.css`.
    Style,
    /// `favicon.svg`.
    Icon,
}

impl Asset {
    /// The asset named `name` (the path after `/assets/`).
    pub(crate) fn named(name: &str) -> Option<Asset> {
        match name {
            "app.js" => Some(Asset::Script),
            "app.css" => Some(Asset::Style),
            "favicon.svg" => Some(Asset::Icon),
            _ => None,
        }
    }

    /// Its text.
    pub(crate) fn body(self) -> &'static str {
        match self {
            Asset::Script => APP_JS,
            Asset::Style => APP_CSS,
            Asset::Icon => FAVICON,
        }
    }

    /// Its `Content-Type`.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Asset::Script => "text/javascript; charset=utf-8",
            Asset::Style => "text/css; charset=utf-8",
            Asset::Icon => "image/svg+xml",
        }
    }
}

/// `index.html` with `token` in its `theseus-token` meta tag.
pub(crate) fn index_html(token: &str) -> String {
    INDEX.replace(TOKEN_PLACEHOLDER, &escape_html(token))
}

/// `text` safe inside an HTML element or a quoted attribute value.
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_carries_the_token_escaped() {
        assert!(INDEX.contains(r#"name="theseus-token""#) && INDEX.contains(r#"content="{{TOKEN}}""#));
        let page = index_html(r#"a"b<c>&'d"#);
        assert!(page.contains(r#"content="a&quot;b&lt;c&gt;&amp;&#39;d""#), "{page}");
        assert!(!page.contains(TOKEN_PLACEHOLDER));
    }

    #[test]
    fn index_loads_the_script_and_style_and_inlines_neither() {
        // The pages' Content-Security-Policy allows no inline scripts or styles.
        assert!(INDEX.contains(r#"src="/assets/app.js""#));
        assert!(INDEX.contains(r#"href="/assets/app.css""#));
        assert!(!INDEX.contains("<style"));
        assert!(!INDEX.contains(" style="));
        for (at, _) in INDEX.match_indices("<script") {
            let tag = &INDEX[at..at + INDEX[at..].find('>').unwrap()];
            assert!(tag.contains("src="), "an inline script: {tag}");
        }
    }

    #[test]
    fn assets_by_name() {
        assert_eq!(Asset::named("app.js"), Some(Asset::Script));
        assert_eq!(Asset::named("app.css").map(Asset::content_type), Some("text/css; charset=utf-8"));
        assert_eq!(Asset::named("favicon.svg").map(|a| a.body().contains("<svg")), Some(true));
        assert_eq!(Asset::named("index.html"), None);
        assert_eq!(Asset::named("../Cargo.toml"), None);
    }
}
