//! What the wire formats' gateways share about the parts of a message
//! that are not text: each reads its own shape into rein's
//! [`Part`](rein_engine::provider::Part), and an image's URL is checked
//! here once, so a client's mistake is a 400 before any provider is asked
//! rather than a provider's refusal after the call was counted.

/// Checks that `url` is an image a provider can be given: `http(s)://…`,
/// or a base64 `data:image/…` URL.
///
/// # Errors
///
/// Why it is not, in a sentence for the client.
pub(super) fn image_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(());
    }
    let Some(data_url) = url.strip_prefix("data:") else {
        return Err("an image URL must be `https://…` or a `data:image/…;base64,…` URL".into());
    };
    let Some((media_type, data)) = data_url.split_once(";base64,") else {
        return Err("an image data URL must be base64: `data:image/TYPE;base64,DATA`".into());
    };
    if !media_type.starts_with("image/") {
        return Err(format!(
            "an image data URL must be of an `image/…` type, not `{media_type}`"
        ));
    }
    if data.is_empty() || !data.bytes().all(is_base64) {
        return Err("an image data URL's data must be base64".into());
    }
    Ok(())
}

/// The data URL of base64 `data` of `media_type`, for a format that sends
/// the two apart (Anthropic's base64 image source).
pub(super) fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_a_web_url_or_a_base64_image_data_url() {
        assert!(image_url("https://example.com/a.png").is_ok());
        assert!(image_url("data:image/png;base64,iVBORw0KGgo=").is_ok());
        let why = |url: &str| image_url(url).unwrap_err();
        assert!(why("file:///etc/passwd").contains("https://"));
        assert!(why("data:image/png,rawbytes").contains("base64"));
        assert!(why("data:text/plain;base64,aGk=").contains("`text/plain`"));
        assert!(why("data:image/png;base64,not base64!").contains("base64"));
        assert!(why("data:image/png;base64,").contains("base64"));
    }
}
