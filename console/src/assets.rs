//! The console's pages, embedded at build time (see `build.rs`).

use axum::extract::Path;
use axum::http::{StatusCode, header};
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

fn serve(path: &str) -> Response {
    match lookup(path) {
        Some(bytes) => (
            [
                (header::CONTENT_TYPE, content_type(path)),
                // The pages change with the binary: a browser asks again
                // rather than keep one from an older version.
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                // Nothing but this origin: no inline script, no framing.
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'",
                ),
            ],
            bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file in the console\n").into_response(),
    }
}

/// `/ui`: the page.
pub(crate) async fn index() -> Response {
    serve("index.html")
}

/// `/ui/assets/{path}`.
pub(crate) async fn file(Path(path): Path<String>) -> Response {
    serve(&path)
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
    fn types_follow_extensions() {
        assert_eq!(content_type("a/b.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("x"), "application/octet-stream");
    }
}
