//! A request body's `Content-Encoding`: what the door takes (none,
//! `identity`, and one layer of `gzip`, of which `x-gzip` is the old name)
//! and how a gzip body is inflated before its records are read from it.
//!
//! Any other encoding (`br`, `zstd`, `deflate`, gzip twice...) is a 415
//! naming it, refused before the body is read: storing the encoded bytes
//! as if they were records is exactly what must not happen. The size cap
//! (`server.http.body_bytes_max`) holds for the decoded bytes, checked as
//! they come out of the inflater, so a small body that inflates to
//! gigabytes (a zip bomb) is refused with a 413 after at most the cap's
//! worth of output, and the output never holds more than the cap.

use std::io::Read;

use bytes::Bytes;
use flate2::read::MultiGzDecoder;
use hyper::header::{GetAll, HeaderValue};

use super::body::Refusal;

/// Inflated bytes taken per step; between steps the task yields, so a
/// large body does not keep the arbiter's other connections waiting.
const INFLATE_STEP_BYTES: usize = 64 * 1024;

/// How the body on the wire is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As it is (no `Content-Encoding`, or `identity`).
    Identity,
    /// One layer of gzip (RFC 1952; several members one after the other,
    /// as `cat a.gz b.gz` makes, are one body).
    Gzip,
}

impl Encoding {
    /// The encoding the `Content-Encoding` header lines declare. `identity`
    /// tokens are no encoding; one `gzip` (or `x-gzip`) is; anything else,
    /// or more than one layer, is a 415 naming what was declared.
    pub fn of(headers: GetAll<'_, HeaderValue>) -> Result<Encoding, Refusal> {
        let mut declared = Vec::new();
        for value in headers {
            let text = value.to_str().map_err(|_| {
                Refusal::new(
                    415,
                    format!(
                        "Content-Encoding {:?} is not readable text: send gzip, identity or none",
                        String::from_utf8_lossy(value.as_bytes())
                    ),
                )
            })?;
            declared.extend(
                text.split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .filter(|t| !t.is_empty() && t != "identity"),
            );
        }
        match declared.as_slice() {
            [] => Ok(Encoding::Identity),
            [one] if one == "gzip" || one == "x-gzip" => Ok(Encoding::Gzip),
            [one] => Err(Refusal::new(
                415,
                format!("Content-Encoding {one:?} is not supported: send gzip, identity or none"),
            )),
            layers => Err(Refusal::new(
                415,
                format!(
                    "Content-Encoding {:?} stacks {} encodings: send one layer of gzip, or none",
                    layers.join(", "),
                    layers.len()
                ),
            )),
        }
    }
}

/// The bytes `body` inflates to, at most `decoded_bytes_max` of them
/// (`server.http.body_bytes_max`): past it, a 413 naming the limit. The
/// output's capacity never passes the cap, and `grow` is asked before it
/// grows, with the bytes it grows by (the daemon's read-buffer budget; an
/// error from it stops the decoding). A stream that is not gzip, or is
/// corrupt or cut short, is a 400 saying so.
pub async fn gunzip(
    body: &[u8],
    decoded_bytes_max: u64,
    mut grow: impl FnMut(u64) -> Result<(), Refusal>,
) -> Result<Bytes, Refusal> {
    let cap = usize::try_from(decoded_bytes_max).unwrap_or(usize::MAX);
    let mut inflater = MultiGzDecoder::new(body);
    let mut step = vec![0u8; INFLATE_STEP_BYTES];
    let mut out: Vec<u8> = Vec::new();
    loop {
        let n = match inflater.read(&mut step) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Refusal::new(
                    400,
                    format!(
                        "the body is declared Content-Encoding: gzip but is not a whole gzip stream ({e}) after {} decoded bytes",
                        out.len()
                    ),
                ))
            }
        };
        if out.len() + n > cap {
            return Err(Refusal::new(
                413,
                format!(
                    "the gzip body inflates to more than server.http.body_bytes_max ({decoded_bytes_max} bytes), which holds for the decoded bytes"
                ),
            ));
        }
        if out.capacity() < out.len() + n {
            // Doubling, as a Vec would, but never past the cap.
            let want = (out.capacity() * 2).max(out.len() + n).min(cap);
            grow((want - out.capacity()) as u64)?;
            out.reserve_exact(want - out.len());
        }
        out.extend_from_slice(&step[..n]);
        tokio::task::yield_now().await;
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::write::GzEncoder;
    use flate2::Compression;
    use hyper::header::{HeaderMap, CONTENT_ENCODING};

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn encoding(values: &[&str]) -> Result<Encoding, Refusal> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(CONTENT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        Encoding::of(h.get_all(CONTENT_ENCODING))
    }

    #[test]
    fn gzip_and_identity_are_taken_and_the_rest_is_a_415_naming_it() {
        assert_eq!(encoding(&[]), Ok(Encoding::Identity));
        assert_eq!(encoding(&["identity"]), Ok(Encoding::Identity));
        assert_eq!(encoding(&["GZIP"]), Ok(Encoding::Gzip));
        assert_eq!(encoding(&["x-gzip"]), Ok(Encoding::Gzip));
        assert_eq!(encoding(&["identity, gzip"]), Ok(Encoding::Gzip));
        for (values, says) in [
            (&["zstd"][..], "\"zstd\" is not supported"),
            (&["br"], "\"br\""),
            (&["deflate"], "\"deflate\""),
            (&["gzip, gzip"], "stacks 2 encodings"),
            (&["gzip", "br"], "\"gzip, br\" stacks"),
        ] {
            let e = encoding(values).unwrap_err();
            assert_eq!(e.status, 415, "{values:?}: {e:?}");
            assert!(e.message.contains(says), "{values:?}: {e:?}");
        }
    }

    #[test]
    fn a_gzip_body_inflates_and_concatenated_members_are_one_body() {
        let mut body = gzip(b"one\ntwo\n");
        body.extend(gzip(b"three\n"));
        let got = run(gunzip(&body, 1024, |_| Ok(()))).unwrap();
        assert_eq!(&got[..], b"one\ntwo\nthree\n");
    }

    #[test]
    fn a_bomb_stops_at_the_cap_without_holding_more() {
        // 64 MiB of zeros squeeze into ~64 KiB.
        let bomb = gzip(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 128 << 10, "{}", bomb.len());
        let cap = 1u64 << 20;
        let mut asked = 0;
        let e = run(gunzip(&bomb, cap, |n| {
            asked += n;
            Ok(())
        }))
        .unwrap_err();
        assert_eq!(e.status, 413, "{e:?}");
        assert!(
            e.message.contains("body_bytes_max (1048576 bytes)"),
            "{e:?}"
        );
        assert!(
            asked <= cap,
            "the output grew to {asked} bytes, past the cap"
        );
        // Exactly the cap is fine.
        let full = gzip(&vec![b'x'; cap as usize]);
        assert_eq!(
            run(gunzip(&full, cap, |_| Ok(()))).unwrap().len(),
            cap as usize
        );
    }

    #[test]
    fn a_corrupt_or_cut_stream_is_a_400_saying_so() {
        let good = gzip(b"some record\n");
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        let cut = &good[..good.len() - 4];
        for (what, body) in [
            ("not gzip", &b"plain text\n"[..]),
            ("flipped", &flipped),
            ("cut", cut),
        ] {
            let e = run(gunzip(body, 1024, |_| Ok(()))).unwrap_err();
            assert_eq!(e.status, 400, "{what}: {e:?}");
            assert!(
                e.message.contains("not a whole gzip stream"),
                "{what}: {e:?}"
            );
        }
    }

    #[test]
    fn a_budget_that_says_no_stops_the_decoding() {
        let body = gzip(&vec![b'x'; 300 << 10]);
        let e = run(gunzip(&body, 1 << 20, |_| Err(Refusal::new(503, "full")))).unwrap_err();
        assert_eq!(e.status, 503);
    }
}
