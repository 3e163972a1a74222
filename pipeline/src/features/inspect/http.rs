//! The host and path of an HTTP/1.x request (RFC 9112), read from its head as it arrives.
//!
//! [`HttpScanner`] keeps the request line and at most one header line in a fixed buffer:
//! header lines other than Host are recognised by their first bytes and skipped as they
//! stream past, so long cookies do not crowd the Host header out. It answers as soon as it
//! has the host, usually at the first header line, without waiting for the end of the head.
//!
//! Only the first request of a connection is read. A client may send later requests on the
//! same connection to another Host (the server decides per request); the caller calls
//! [`HttpScanner::reset`] at the next request boundary if it tracks them.

use core::fmt;

/// The buffer holding the request line and the header line being read.
pub const HEAD_CAPACITY: usize = 512;

/// Bytes of head the scanner reads looking for Host before it gives up. Servers refuse heads
/// much past this (nginx and Apache at 8 KiB a line), so a request hiding its Host deeper is
/// not one a server would answer.
pub const MAX_HEAD: u32 = 32 * 1024;

/// Blank lines tolerated before the request line (RFC 9112 §2.2: a server should ignore at
/// least one, left over from a previous request's body).
const MAX_LEADING_BLANK: u8 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Head,
    Put,
    Delete,
    Options,
    Patch,
    Connect,
}

/// Method tokens are case-sensitive (RFC 9110 §9.1).
const METHODS: [(&[u8], Method); 8] = [
    (b"GET", Method::Get),
    (b"POST", Method::Post),
    (b"HEAD", Method::Head),
    (b"PUT", Method::Put),
    (b"DELETE", Method::Delete),
    (b"OPTIONS", Method::Options),
    (b"PATCH", Method::Patch),
    (b"CONNECT", Method::Connect),
];

/// What the bytes fed so far say about the request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum HttpState<'a> {
    /// A valid request head so far: wait for more bytes.
    NeedMore,
    /// The request's host (lowercase, port and one trailing dot stripped; empty if the
    /// request names none) and its request-target: origin-form path with query ("/a?b=c"),
    /// the path of an absolute-form target, "*", or empty for CONNECT.
    Request {
        method: Method,
        host: &'a [u8],
        path: &'a [u8],
    },
    /// Not an HTTP/1.x request with a known method.
    NotHttp,
    /// The request line, or request line and Host line together, outgrow the buffer, or
    /// the head runs past [`MAX_HEAD`] without a Host.
    TooLong,
}

impl fmt::Debug for HttpState<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpState::NeedMore => f.write_str("NeedMore"),
            HttpState::Request { method, host, path } => f
                .debug_struct("Request")
                .field("method", method)
                .field("host", &String::from_utf8_lossy(host))
                .field("path", &String::from_utf8_lossy(path))
                .finish(),
            HttpState::NotHttp => f.write_str("NotHttp"),
            HttpState::TooLong => f.write_str("TooLong"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    RequestLine,
    /// Gathering a header line that may be Host.
    HeaderLine,
    /// Passing over a header line that is not Host, up to its LF.
    SkipLine,
    Request(Method),
    NotHttp,
    TooLong,
}

/// A range of `buf`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    start: u16,
    end: u16,
}

impl Span {
    fn range(self) -> core::ops::Range<usize> {
        usize::from(self.start)..usize::from(self.end)
    }
}

/// Reads one HTTP/1.x request head from successive payloads of a TCP stream, in a fixed
/// buffer.
#[derive(Clone)]
pub struct HttpScanner {
    buf: [u8; HEAD_CAPACITY],
    len: u16,
    phase: Phase,
    method: Option<Method>,
    /// Where the header line being gathered starts: the end of the request line.
    line_start: u16,
    /// The line being gathered is known to be a Host line.
    host_line: bool,
    host: Span,
    path: Span,
    seen: u32,
    blank_lines: u8,
}

impl Default for HttpScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for HttpScanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpScanner")
            .field("state", &self.state())
            .field("len", &self.len)
            .field("seen", &self.seen)
            .finish()
    }
}

enum HostLine {
    Maybe,
    Yes,
    No,
}

impl HttpScanner {
    pub const fn new() -> Self {
        HttpScanner {
            buf: [0; HEAD_CAPACITY],
            len: 0,
            phase: Phase::RequestLine,
            method: None,
            line_start: 0,
            host_line: false,
            host: Span { start: 0, end: 0 },
            path: Span { start: 0, end: 0 },
            seen: 0,
            blank_lines: 0,
        }
    }

    /// Starts over for the next request on the connection. The buffer's old bytes stay: they
    /// are never read before being written again.
    pub fn reset(&mut self) {
        self.len = 0;
        self.phase = Phase::RequestLine;
        self.method = None;
        self.line_start = 0;
        self.host_line = false;
        self.host = Span::default();
        self.path = Span::default();
        self.seen = 0;
        self.blank_lines = 0;
    }

    /// Feeds the stream's next bytes. Once the state is anything but `NeedMore` it no longer
    /// changes, and later bytes are ignored.
    pub fn feed(&mut self, bytes: &[u8]) -> HttpState<'_> {
        let mut rest = bytes;
        while self.in_progress() {
            if rest.is_empty() {
                break;
            }
            let before = rest.len();
            rest = if self.phase == Phase::SkipLine {
                self.skip_line(rest)
            } else {
                match rest.split_first() {
                    Some((&b, tail)) => {
                        self.byte(b);
                        tail
                    }
                    None => rest,
                }
            };
            let consumed = u32::try_from(before - rest.len()).unwrap_or(u32::MAX);
            self.seen = self.seen.saturating_add(consumed);
            if self.in_progress() && self.seen > MAX_HEAD {
                self.phase = Phase::TooLong;
            }
        }
        self.state()
    }

    /// The state the bytes fed so far left the scanner in.
    pub fn state(&self) -> HttpState<'_> {
        match self.phase {
            Phase::Request(method) => HttpState::Request {
                method,
                host: self.buf.get(self.host.range()).unwrap_or_default(),
                path: self.buf.get(self.path.range()).unwrap_or_default(),
            },
            Phase::NotHttp => HttpState::NotHttp,
            Phase::TooLong => HttpState::TooLong,
            Phase::RequestLine | Phase::HeaderLine | Phase::SkipLine => HttpState::NeedMore,
        }
    }

    /// The request's host, once it is known.
    pub fn host(&self) -> Option<&[u8]> {
        match self.state() {
            HttpState::Request { host, .. } => Some(host),
            _ => None,
        }
    }

    /// The request's target, once the request is known.
    pub fn path(&self) -> Option<&[u8]> {
        match self.state() {
            HttpState::Request { path, .. } => Some(path),
            _ => None,
        }
    }

    pub fn method(&self) -> Option<Method> {
        match self.phase {
            Phase::Request(method) => Some(method),
            _ => None,
        }
    }

    fn in_progress(&self) -> bool {
        matches!(
            self.phase,
            Phase::RequestLine | Phase::HeaderLine | Phase::SkipLine
        )
    }

    fn byte(&mut self, b: u8) {
        match self.phase {
            Phase::RequestLine => {
                if self.len == 0 && (b == b'\r' || b == b'\n') {
                    if b == b'\n' {
                        self.blank_lines += 1;
                        if self.blank_lines > MAX_LEADING_BLANK {
                            self.phase = Phase::NotHttp;
                        }
                    }
                    return;
                }
                if !self.push(b) {
                    return;
                }
                if self.method.is_none() {
                    self.check_method();
                } else if b == b'\n' {
                    self.end_request_line();
                }
            }
            Phase::HeaderLine => {
                if !self.push(b) {
                    return;
                }
                if b == b'\n' {
                    self.end_header_line();
                    return;
                }
                if self.host_line {
                    return;
                }
                let line = self.buf.get(self.line().range()).unwrap_or_default();
                match host_line(line) {
                    HostLine::Maybe => {}
                    HostLine::Yes => self.host_line = true,
                    HostLine::No => {
                        self.len = self.line_start;
                        self.phase = Phase::SkipLine;
                    }
                }
            }
            _ => {}
        }
    }

    /// Consumes bytes of a skipped line up to and including its LF.
    fn skip_line<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        match bytes.iter().position(|&b| b == b'\n') {
            Some(lf) => {
                self.phase = Phase::HeaderLine;
                bytes.get(lf + 1..).unwrap_or_default()
            }
            None => &[],
        }
    }

    /// False, and the scanner given up, if the buffer is full.
    fn push(&mut self, b: u8) -> bool {
        match self.buf.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
                true
            }
            None => {
                self.phase = Phase::TooLong;
                false
            }
        }
    }

    fn line(&self) -> Span {
        Span {
            start: self.line_start,
            end: self.len,
        }
    }

    /// Rejects a stream as soon as its first bytes cannot begin a known method, so that
    /// other protocols on port 80 cost a byte or two.
    fn check_method(&mut self) {
        let prefix = self.buf.get(..usize::from(self.len)).unwrap_or_default();
        if let Some((&b' ', name)) = prefix.split_last() {
            self.method = METHODS.iter().find(|(m, _)| *m == name).map(|&(_, m)| m);
            if self.method.is_none() {
                self.phase = Phase::NotHttp;
            }
        } else if !METHODS.iter().any(|(m, _)| m.starts_with(prefix)) {
            self.phase = Phase::NotHttp;
        }
    }

    /// request-line = method SP request-target SP HTTP-version
    fn end_request_line(&mut self) {
        let line_end = usize::from(self.len);
        let line = self.buf.get(..line_end).unwrap_or_default();
        let line = strip_eol(line);
        let method_end = line.iter().position(|&b| b == b' ').unwrap_or(0) + 1;
        let rest = line.get(method_end..).unwrap_or_default();
        let Some(sp) = rest.iter().position(|&b| b == b' ') else {
            self.phase = Phase::NotHttp;
            return;
        };
        let target = rest.get(..sp).unwrap_or_default();
        let version = rest.get(sp + 1..).unwrap_or_default();
        if target.is_empty() || !target.iter().all(|&b| b > b' ' && b != 0x7F) {
            self.phase = Phase::NotHttp;
            return;
        }
        if !matches!(version, [b'H', b'T', b'T', b'P', b'/', b'1', b'.', d] if d.is_ascii_digit()) {
            self.phase = Phase::NotHttp;
            return;
        }
        // Offsets fit u16: the line is in a 512-byte buffer.
        let target = Span {
            start: method_end as u16,
            end: (method_end + sp) as u16,
        };
        let Some(method) = self.method else {
            self.phase = Phase::NotHttp;
            return;
        };
        let host = match self.classify_target(method, target) {
            Some(host) => host,
            None => {
                self.phase = Phase::NotHttp;
                return;
            }
        };
        self.line_start = line_end as u16;
        match host {
            // The target's authority overrides any Host header (RFC 9112 §3.2.2).
            Some(host) if host.start < host.end => {
                self.host = host;
                self.phase = Phase::Request(method);
            }
            _ => self.phase = Phase::HeaderLine,
        }
    }

    /// Sets the path from the request-target, and returns the host it names, if any. `None`
    /// if the target has no form RFC 9112 §3.2 allows.
    fn classify_target(&mut self, method: Method, target: Span) -> Option<Option<Span>> {
        let t = self.buf.get(target.range())?;
        if method == Method::Connect {
            // authority-form: "host:port"; there is no path.
            self.path = Span {
                start: target.end,
                end: target.end,
            };
            return Some(Some(self.authority_host(target)));
        }
        if t.first() == Some(&b'/') || t == b"*" {
            self.path = target;
            return Some(None);
        }
        // absolute-form: scheme "://" authority path-abempty [ "?" query ]
        let scheme_end = t.windows(3).position(|w| w == b"://")?;
        let scheme = t.get(..scheme_end)?;
        let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
            && scheme
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if !scheme_ok {
            return None;
        }
        let auth_start = scheme_end + 3;
        let after = t.get(auth_start..)?;
        let auth_len = after
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#'))
            .unwrap_or(after.len());
        let auth_start = target.start + auth_start as u16;
        let auth_end = auth_start + auth_len as u16;
        self.path = Span {
            start: auth_end,
            end: target.end,
        };
        Some(Some(self.authority_host(Span {
            start: auth_start,
            end: auth_end,
        })))
    }

    fn end_header_line(&mut self) {
        let line = self.line();
        let content = strip_eol(self.buf.get(line.range()).unwrap_or_default());
        let method = self.method.unwrap_or(Method::Get);
        if content.is_empty() {
            // End of the head without a Host: HTTP/1.0, or a client the server will refuse.
            self.host = Span {
                start: line.start,
                end: line.start,
            };
            self.phase = Phase::Request(method);
            return;
        }
        if self.host_line {
            let colon = content.iter().position(|&b| b == b':').unwrap_or(0);
            let value = Span {
                start: line.start + colon as u16 + 1,
                end: line.start + content.len() as u16,
            };
            self.host = self.authority_host(value);
            self.phase = Phase::Request(method);
            return;
        }
        // A line too short to rule out Host before its LF ("host\r\n"): not a header
        // anyone acts on.
        self.len = self.line_start;
    }

    /// The host in an authority (a Host value or a target's authority): whitespace trimmed,
    /// userinfo and port dropped, one trailing dot dropped (a name with a trailing dot is the
    /// same host), lowercased in place.
    fn authority_host(&mut self, span: Span) -> Span {
        let Some(a) = self.buf.get(span.range()) else {
            return Span::default();
        };
        let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
        let lead = a.iter().take_while(|b| is_ows(b)).count();
        let trail = a.iter().rev().take_while(|b| is_ows(b)).count();
        let mut start = usize::from(span.start) + lead;
        let end = usize::from(span.end).saturating_sub(trail).max(start);
        let a = self.buf.get(start..end).unwrap_or_default();
        if let Some(at) = a.iter().rposition(|&b| b == b'@') {
            start += at + 1;
        }
        let a = self.buf.get(start..end).unwrap_or_default();
        let mut host_len = if a.first() == Some(&b'[') {
            // An IPv6 literal keeps its brackets; its colons are not a port.
            a.iter().position(|&b| b == b']').map_or(a.len(), |i| i + 1)
        } else {
            a.iter().position(|&b| b == b':').unwrap_or(a.len())
        };
        if host_len > 0 && a.get(host_len - 1) == Some(&b'.') {
            host_len -= 1;
        }
        if let Some(host) = self.buf.get_mut(start..start + host_len) {
            host.make_ascii_lowercase();
        }
        Span {
            start: start as u16,
            end: (start + host_len) as u16,
        }
    }
}

/// Whether a (partial) header line is a Host line. "Host" followed by whitespace before the
/// colon is invalid (RFC 9112 §5.1) but counted as Host: a server lenient enough to accept it
/// must not find a host the scanner missed.
fn host_line(line: &[u8]) -> HostLine {
    const NAME: &[u8] = b"host";
    if line == b"\r" {
        return HostLine::Maybe;
    }
    let n = line.len().min(NAME.len());
    let (head, tail) = line.split_at(n);
    if !head.eq_ignore_ascii_case(NAME.get(..n).unwrap_or_default()) {
        return HostLine::No;
    }
    for &b in tail {
        match b {
            b' ' | b'\t' => {}
            b':' => return HostLine::Yes,
            _ => return HostLine::No,
        }
    }
    HostLine::Maybe
}

/// A line without its LF and the CR before it, if any.
fn strip_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The state after feeding `parts` in turn, as owned strings for comparison.
    fn scan(parts: &[&[u8]]) -> Result<(Method, String, String), HttpState<'static>> {
        let mut s = HttpScanner::new();
        let mut last = HttpState::NeedMore;
        for part in parts {
            last = s.feed(part);
        }
        match last {
            HttpState::Request { method, host, path } => Ok((
                method,
                String::from_utf8(host.to_vec()).unwrap(),
                String::from_utf8(path.to_vec()).unwrap(),
            )),
            HttpState::NeedMore => Err(HttpState::NeedMore),
            HttpState::NotHttp => Err(HttpState::NotHttp),
            HttpState::TooLong => Err(HttpState::TooLong),
        }
    }

    fn ok(
        method: Method,
        host: &str,
        path: &str,
    ) -> Result<(Method, String, String), HttpState<'static>> {
        Ok((method, host.to_string(), path.to_string()))
    }

    const REQ: &[u8] = b"GET /search?q=cats HTTP/1.1\r\nUser-Agent: test/1.0\r\nHost: www.Example.com\r\nAccept: */*\r\n\r\n";

    #[test]
    fn whole_request() {
        assert_eq!(
            scan(&[REQ]),
            ok(Method::Get, "www.example.com", "/search?q=cats")
        );
    }

    #[test]
    fn split_in_the_middle_of_the_host_header() {
        let at = REQ.windows(8).position(|w| w == b"Example.").unwrap() + 3;
        let (a, b) = REQ.split_at(at);
        let mut s = HttpScanner::new();
        assert_eq!(s.feed(a), HttpState::NeedMore);
        assert_eq!(s.host(), None);
        assert_eq!(
            s.feed(b),
            HttpState::Request {
                method: Method::Get,
                host: b"www.example.com",
                path: b"/search?q=cats"
            }
        );
        assert_eq!(s.host(), Some(&b"www.example.com"[..]));
        assert_eq!(s.path(), Some(&b"/search?q=cats"[..]));
        assert_eq!(s.method(), Some(Method::Get));
    }

    #[test]
    fn every_split_and_byte_by_byte() {
        let want = ok(Method::Get, "www.example.com", "/search?q=cats");
        for at in 0..=REQ.len() {
            assert_eq!(scan(&[&REQ[..at], &REQ[at..]]), want, "split at {at}");
        }
        let bytes: Vec<&[u8]> = REQ.chunks(1).collect();
        assert_eq!(scan(&bytes), want);
    }

    #[test]
    fn answers_at_the_host_line() {
        let head = b"POST /upload HTTP/1.1\r\nHOST: Upload.Example.net\r\n";
        assert_eq!(
            scan(&[head]),
            ok(Method::Post, "upload.example.net", "/upload")
        );
        let head = b"PUT /x HTTP/1.0\r\nhost:lower.example\r\n";
        assert_eq!(scan(&[head]), ok(Method::Put, "lower.example", "/x"));
        // Not yet: the Host line's end has not arrived.
        assert_eq!(
            scan(&[b"GET / HTTP/1.1\r\nHost: a.exa"]),
            Err(HttpState::NeedMore)
        );
    }

    #[test]
    fn host_forms() {
        let cases: &[(&[u8], &str)] = &[
            (b"Host: example.com:8080", "example.com"),
            (b"Host:\texample.com \t", "example.com"),
            (b"Host: Example.COM.", "example.com"),
            (b"Host: example.com.:80", "example.com"),
            (b"Host: [2001:DB8::1]:8080", "[2001:db8::1]"),
            (b"Host: 192.0.2.1:80", "192.0.2.1"),
            (b"Host : spaced.example", "spaced.example"),
            (b"Host:", ""),
        ];
        for (line, host) in cases {
            let req = [b"GET / HTTP/1.1\r\n", *line, b"\r\n\r\n"].concat();
            assert_eq!(
                scan(&[&req]),
                ok(Method::Get, host, "/"),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn skips_other_headers_including_lookalikes_and_long_ones() {
        let cookie = [b"Cookie: ".as_slice(), &[b'c'; 4000], b"\r\n"].concat();
        let req = [
            b"GET /p HTTP/1.1\r\n".as_slice(),
            b"X-Host: decoy.example\r\n",
            b"Hostname: decoy.example\r\n",
            b"Hos: decoy.example\r\n",
            b" Host: folded.example\r\n",
            &cookie,
            b"host: real.example\r\n\r\n",
        ]
        .concat();
        assert_eq!(scan(&[&req]), ok(Method::Get, "real.example", "/p"));
        let bytes: Vec<&[u8]> = req.chunks(7).collect();
        assert_eq!(scan(&bytes), ok(Method::Get, "real.example", "/p"));
    }

    #[test]
    fn request_without_host() {
        assert_eq!(
            scan(&[b"GET /old HTTP/1.0\r\n\r\n"]),
            ok(Method::Get, "", "/old")
        );
        assert_eq!(
            scan(&[b"GET /old HTTP/1.0\n\n"]),
            ok(Method::Get, "", "/old")
        );
        assert_eq!(
            scan(&[b"GET /old HTTP/1.0\r\nAccept: */*\r\n\r\n"]),
            ok(Method::Get, "", "/old")
        );
    }

    #[test]
    fn target_forms() {
        // absolute-form: the target's authority wins over the Host header.
        let req =
            b"GET http://User:pw@Proxy.Example:3128/a/b?c HTTP/1.1\r\nHost: other.example\r\n\r\n";
        assert_eq!(scan(&[req]), ok(Method::Get, "proxy.example", "/a/b?c"));
        assert_eq!(
            scan(&[b"GET HTTPS://x.example HTTP/1.1\r\n"]),
            ok(Method::Get, "x.example", "")
        );
        assert_eq!(
            scan(&[b"GET http://x.example?q HTTP/1.1\r\n"]),
            ok(Method::Get, "x.example", "?q")
        );
        // An empty authority falls back to the Host header.
        assert_eq!(
            scan(&[b"GET http:///p HTTP/1.1\r\nHost: h.example\r\n"]),
            ok(Method::Get, "h.example", "/p")
        );
        // authority-form for CONNECT.
        assert_eq!(
            scan(&[b"CONNECT Tunnel.Example:443 HTTP/1.1\r\nHost: tunnel.example:443\r\n\r\n"]),
            ok(Method::Connect, "tunnel.example", "")
        );
        assert_eq!(
            scan(&[b"OPTIONS * HTTP/1.1\r\nHost: o.example\r\n"]),
            ok(Method::Options, "o.example", "*")
        );
        for m in ["HEAD", "DELETE", "PATCH"] {
            let req = format!("{m} /r HTTP/1.1\r\nHost: m.example\r\n");
            assert!(scan(&[req.as_bytes()]).is_ok(), "{m}");
        }
    }

    #[test]
    fn leading_blank_lines_are_ignored() {
        assert_eq!(
            scan(&[b"\r\n\r\nGET / HTTP/1.1\r\nHost: a.example\r\n"]),
            ok(Method::Get, "a.example", "/")
        );
        assert_eq!(
            scan(&[b"\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n"]),
            Err(HttpState::NotHttp)
        );
    }

    #[test]
    fn not_http() {
        let cases: &[&[u8]] = &[
            b"\x16\x03\x01\x02\x00\x01",
            b"SSH-2.0-OpenSSH_9.6\r\n",
            b"get / HTTP/1.1\r\n",
            b"GETS / HTTP/1.1\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"GET / HTTP/2.0\r\n",
            b"GET / http/1.1\r\n",
            b"GET /\r\n",
            b"GET  / HTTP/1.1\r\n",
            b"GET / HTTP/1.1 extra\r\n",
            b"GET noslash HTTP/1.1\r\n",
            b"GET 1http://x/ HTTP/1.1\r\n",
            b"GET /a\x01b HTTP/1.1\r\n",
            b"GET\r\n",
        ];
        for c in cases {
            assert_eq!(
                scan(&[c]),
                Err(HttpState::NotHttp),
                "{:?}",
                String::from_utf8_lossy(c)
            );
        }
        // Rejected at the first byte that cannot start a method.
        let mut s = HttpScanner::new();
        assert_eq!(s.feed(b"X"), HttpState::NotHttp);
        let mut s = HttpScanner::new();
        assert_eq!(s.feed(b"CONNEC"), HttpState::NeedMore);
        assert_eq!(s.feed(b"x"), HttpState::NotHttp);
    }

    #[test]
    fn too_long() {
        let long_target = [
            b"GET /".as_slice(),
            &[b'a'; HEAD_CAPACITY],
            b" HTTP/1.1\r\n",
        ]
        .concat();
        assert_eq!(scan(&[&long_target]), Err(HttpState::TooLong));
        // Request line and Host line together outgrow the buffer.
        let path = "a".repeat(300);
        let host = "h".repeat(250);
        let req = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\n");
        assert_eq!(scan(&[req.as_bytes()]), Err(HttpState::TooLong));
        // A head that never names its Host.
        let filler = b"X-Filler: 0123456789012345678901234567890123456789\r\n";
        let mut s = HttpScanner::new();
        assert_eq!(s.feed(b"GET / HTTP/1.1\r\n"), HttpState::NeedMore);
        let mut last = HttpState::NeedMore;
        for _ in 0..(MAX_HEAD as usize / filler.len() + 1) {
            last = s.feed(filler);
        }
        assert_eq!(last, HttpState::TooLong);
        // Just fits: request line of 490 bytes and a short Host line.
        let path = "p".repeat(490 - 16);
        let req = format!("GET /{path} HTTP/1.1\r\nHost: a.b\r\n");
        assert_eq!(
            scan(&[req.as_bytes()]),
            ok(Method::Get, "a.b", &format!("/{path}"))
        );
    }

    #[test]
    fn sticky_and_reset() {
        let mut s = HttpScanner::new();
        assert!(matches!(s.feed(REQ), HttpState::Request { .. }));
        assert!(matches!(s.feed(b"garbage"), HttpState::Request { .. }));
        s.reset();
        assert_eq!(
            s.feed(b"HEAD /h HTTP/1.1\r\nHost: two.example\r\n"),
            HttpState::Request {
                method: Method::Head,
                host: b"two.example",
                path: b"/h",
            }
        );
        s.reset();
        assert_eq!(s.feed(b"nope"), HttpState::NotHttp);
        assert_eq!(s.feed(REQ), HttpState::NotHttp);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            let mut s = HttpScanner::new();
            let _ = s.feed(&bytes);
            // Behind a valid request line, random bytes exercise the header states.
            let mut s = HttpScanner::new();
            let _ = s.feed(b"GET / HTTP/1.1\r\n");
            if let HttpState::Request { host, .. } = s.feed(&bytes) {
                prop_assert!(!host.iter().any(u8::is_ascii_uppercase));
            }
        }

        /// Any split of a request into feeds gives the one-shot answer.
        #[test]
        fn chunking_does_not_matter(
            cuts in proptest::collection::vec(0usize..200, 0..6),
            host in "[A-Za-z0-9.-]{0,40}(:[0-9]{1,5})?",
            path in "/[ -~&&[^ ]]{0,60}",
            junk in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut req = format!("GET {path} HTTP/1.1\r\nAccept: x\r\nHost: {host}\r\n").into_bytes();
            req.extend_from_slice(&junk);
            let whole = scan(&[&req]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (req.len() + 1)).collect();
            cuts.sort_unstable();
            let mut parts = Vec::new();
            let mut last = 0;
            for c in cuts {
                parts.push(&req[last..c]);
                last = c;
            }
            parts.push(&req[last..]);
            prop_assert_eq!(scan(&parts), whole);
        }
    }
}
