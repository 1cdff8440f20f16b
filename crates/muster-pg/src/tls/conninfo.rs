//! A connection string split into its parameters exactly as tokio-postgres reads it, so that
//! `sslmode` and `sslrootcert` are taken from where the driver finds parameters and nowhere
//! else. Both of the driver's grammars (its `Config::from_str`):
//!
//! - a URL (`postgres://` or `postgresql://`): the credentials run to the first `@` of the whole
//!   string (a password may hold an unencoded `?`, `/` or `&`), the parameters start at the
//!   first `?` after it, each `key=value` runs to the next `&`, keys and values percent-decoded
//!   (a `%` without two hex digits after it stays a `%`);
//! - `key = value` pairs: white space allowed around `=`, a value quoted with `'` or bare, `\`
//!   escaping the next character; a key that is empty ends the string.
//!
//! The caller rebuilds the string from the pieces it keeps ([`ConnInfo::join`]) and the driver
//! reads that; [`super::parse_url`] checks the driver's `sslmode` against the one read here.

use crate::PgError;

/// One parameter: as written, and read.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Param<'a> {
    pub raw: &'a str,
    pub key: String,
    pub value: String,
}

/// A connection string: what comes before the parameters (a URL's scheme, credentials, hosts
/// and database; empty for `key = value` pairs), and the parameters in order.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ConnInfo<'a> {
    head: &'a str,
    url: bool,
    pub params: Vec<Param<'a>>,
}

impl<'a> ConnInfo<'a> {
    pub fn split(s: &'a str) -> Result<ConnInfo<'a>, PgError> {
        let body = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|p| s.strip_prefix(p));
        match body {
            Some(body) => split_url(s, body),
            None => Ok(ConnInfo {
                head: "",
                url: false,
                params: key_values(s)?,
            }),
        }
    }

    /// The string again with `params` (raw) in place of the parameters.
    pub fn join<S: AsRef<str>>(&self, params: &[S]) -> String {
        let params: Vec<&str> = params.iter().map(AsRef::as_ref).collect();
        match (self.url, params.is_empty()) {
            (true, true) => self.head.to_owned(),
            (true, false) => format!("{}?{}", self.head, params.join("&")),
            (false, _) => params.join(" "),
        }
    }
}

fn split_url<'a>(s: &'a str, body: &'a str) -> Result<ConnInfo<'a>, PgError> {
    let after_credentials = body.find('@').map_or(0, |at| at + 1);
    let Some(q) = body[after_credentials..].find('?') else {
        return Ok(ConnInfo {
            head: s,
            url: true,
            params: Vec::new(),
        });
    };
    let q = s.len() - body.len() + after_credentials + q;
    let mut params = Vec::new();
    let mut rest = &s[q + 1..];
    while !rest.is_empty() {
        // As the driver: the key runs to the first `=`, the value from there to the next `&`.
        let eq = rest
            .find('=')
            .ok_or_else(|| PgError::Url("a URL parameter without `=`".into()))?;
        let end = rest[eq..].find('&').map_or(rest.len(), |amp| eq + amp);
        let raw = &rest[..end];
        params.push(Param {
            raw,
            key: percent_decode(&raw[..eq])?,
            value: percent_decode(&raw[eq + 1..])?,
        });
        rest = rest.get(end + 1..).unwrap_or("");
    }
    Ok(ConnInfo {
        head: &s[..q],
        url: true,
        params,
    })
}

/// `%XX` decoded, a `%` without two hex digits after it kept (the driver's `percent_decode`).
fn percent_decode(s: &str) -> Result<String, PgError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
        .map_err(|_| PgError::Url("a URL parameter is not UTF-8 once decoded".into()))
}

/// The `key = value` pairs of `s`, as the driver's `Parser` reads them.
fn key_values(s: &str) -> Result<Vec<Param<'_>>, PgError> {
    let mut params = Vec::new();
    let mut chars = s.char_indices().peekable();
    let skip_ws = |chars: &mut std::iter::Peekable<std::str::CharIndices>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_ws(&mut chars);
        let start = chars.peek().map_or(s.len(), |(i, _)| *i);
        let mut key_end = start;
        while let Some((i, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key_end = i + c.len_utf8();
        }
        if key_end == start {
            return Ok(params);
        }
        skip_ws(&mut chars);
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(PgError::Url(format!(
                "`{}` is not followed by `=`",
                &s[start..key_end]
            )));
        }
        skip_ws(&mut chars);
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\'' if quoted => {
                    end = Some(i + 1);
                    break;
                }
                c if c.is_whitespace() && !quoted => {
                    end = Some(i);
                    break;
                }
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                c => value.push(c),
            }
        }
        let end = match end {
            Some(end) => end,
            None if quoted => {
                return Err(PgError::Url("a quoted value is not closed".into()));
            }
            None => s.len(),
        };
        if value.is_empty() && !quoted {
            return Err(PgError::Url(format!(
                "`{}` has no value",
                &s[start..key_end]
            )));
        }
        params.push(Param {
            raw: &s[start..end],
            key: s[start..key_end].to_owned(),
            value,
        });
    }
}
