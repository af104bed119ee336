//! The console's pages, embedded at build time (see `build.rs`).

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/assets.rs"));
}

/// The embedded file at `path` (relative to `assets/`), if any.
pub(crate) fn lookup(path: &str) -> Option<&'static [u8]> {
    embedded::FILES
        .iter()
        .find(|(name, _)| *name == path)
        .map(|(_, bytes)| *bytes)
}

/// The content type a file's extension calls for.
fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") | Some("mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// A file's entity tag: its bytes' CRC-32C and length, so that a browser
/// asking again for a file it holds gets 304 (the pages load a dozen
/// modules; each would otherwise come whole on every visit).
fn etag(bytes: &[u8]) -> String {
    format!("\"{:08x}-{:x}\"", crc32c::crc32c(bytes), bytes.len())
}

fn serve(path: &str, headers: &HeaderMap) -> Response {
    match lookup(path) {
        Some(bytes) => {
            let tag = etag(bytes);
            let held = headers
                .get(header::IF_NONE_MATCH)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
            if held {
                return (StatusCode::NOT_MODIFIED, [(header::ETAG, tag)]).into_response();
            }
            page(path, bytes, tag)
        }
        None => (StatusCode::NOT_FOUND, "no such file in the console\n").into_response(),
    }
}

fn page(path: &str, bytes: &'static [u8], tag: String) -> Response {
    (
            [
                (header::CONTENT_TYPE, content_type(path).to_string()),
                // The pages change with the binary: a browser asks again
                // (and gets 304 while its copy's tag still matches) rather
                // than keep one from an older version.
                (header::ETAG, tag),
                (header::CACHE_CONTROL, "no-cache".to_string()),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
                // Nothing but this origin: no inline script, no framing.
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'"
                        .to_string(),
                ),
            ],
            bytes,
        )
            .into_response()
}

/// `/ui`: the page.
pub(crate) async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `/ui/assets/{path}`.
pub(crate) async fn file(Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&path, &headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_script_are_embedded() {
        assert!(lookup("index.html").is_some());
        assert!(lookup("app.js").is_some());
        assert!(lookup("../Cargo.toml").is_none());
    }

    #[test]
    fn a_file_the_browser_holds_is_not_sent_again() {
        let tag = etag(lookup("app.js").expect("embedded"));
        let mut headers = HeaderMap::new();
        assert_eq!(serve("app.js", &headers).status(), StatusCode::OK);
        headers.insert(header::IF_NONE_MATCH, tag.parse().expect("a header value"));
        assert_eq!(serve("app.js", &headers).status(), StatusCode::NOT_MODIFIED);
        headers.insert(
            header::IF_NONE_MATCH,
            "\"00000000-0\"".parse().expect("a header value"),
        );
        assert_eq!(serve("app.js", &headers).status(), StatusCode::OK);
    }

    #[test]
    fn types_follow_extensions() {
        assert_eq!(content_type("a/b.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("x"), "application/octet-stream");
    }
}
