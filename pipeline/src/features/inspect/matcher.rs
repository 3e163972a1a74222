//! Block lists: domains (a name and everything under it) and keywords (anywhere in a host or
//! URL path), matched in one pass of one Aho-Corasick automaton.
//!
//! Building allocates; matching does not, so [`DomainMatcher`] can sit on the per-packet path
//! behind the parsers of this module.

use std::net::IpAddr;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, MatchKind};

/// RFC 1035: a name is at most 253 bytes in dotted form.
const MAX_DOMAIN_LEN: usize = 253;

/// Keywords longer than this are refused: a path is searched in decoded chunks that overlap
/// by one keyword length, which must stay well inside the chunk.
pub const MAX_KEYWORD_LEN: usize = 255;

/// The window a percent-decoded path is searched in; longer paths are searched window by
/// window.
const DECODE_CHUNK: usize = 512;

/// Why a list could not become a matcher.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The entry at this index (in the [`DomainMatcher::new`] numbering) is empty once
    /// normalised: it would match every host.
    #[error("block list entry {0} is empty")]
    EmptyEntry(usize),
    /// The entry at this index is longer than any host name, or than [`MAX_KEYWORD_LEN`].
    #[error("block list entry {0} is too long")]
    EntryTooLong(usize),
    #[error("cannot build block list matcher: {0}")]
    Automaton(aho_corasick::BuildError),
}

/// Domains and keywords, matched case-insensitively.
///
/// Entries are numbered in the order given: domains first (`0..domains.len()`), then keywords
/// (`domains.len()..`); [`matches`](Self::matches) returns that number.
#[derive(Clone, Debug)]
pub struct DomainMatcher {
    automaton: AhoCorasick,
    /// Patterns below this id are domains, the rest keywords.
    domains: usize,
    /// The longest keyword, for the overlap between decoded path windows.
    max_keyword_len: usize,
}

impl DomainMatcher {
    /// Domains may be written "example.com", "*.example.com", ".example.com" or
    /// "example.com.": all mean the name and every name under it. Keywords are matched as
    /// given, less surrounding whitespace.
    pub fn new(domains: &[String], keywords: &[String]) -> Result<Self, BuildError> {
        let mut patterns: Vec<String> = Vec::with_capacity(domains.len() + keywords.len());
        for (i, d) in domains.iter().enumerate() {
            let d = normalize_domain(d);
            if d.is_empty() {
                return Err(BuildError::EmptyEntry(i));
            }
            if d.len() > MAX_DOMAIN_LEN {
                return Err(BuildError::EntryTooLong(i));
            }
            patterns.push(d);
        }
        let mut max_keyword_len = 0;
        for (i, k) in keywords.iter().enumerate() {
            let k = k.trim();
            if k.is_empty() {
                return Err(BuildError::EmptyEntry(domains.len() + i));
            }
            if k.len() > MAX_KEYWORD_LEN {
                return Err(BuildError::EntryTooLong(domains.len() + i));
            }
            max_keyword_len = max_keyword_len.max(k.len());
            patterns.push(k.to_ascii_lowercase());
        }
        // Standard semantics, the only ones that report overlapping matches: a domain's
        // occurrence that fails its boundary check must not hide another entry's match at
        // the same place.
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(true)
            .build(&patterns)
            .map_err(BuildError::Automaton)?;
        Ok(DomainMatcher {
            automaton,
            domains: domains.len(),
            max_keyword_len,
        })
    }

    /// The number of entries, domains and keywords.
    pub fn len(&self) -> usize {
        self.automaton.patterns_len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `id` (as returned by the match functions) is a keyword rather than a domain.
    pub fn is_keyword(&self, id: usize) -> bool {
        id >= self.domains
    }

    /// The first entry matching a host name: a domain equal to it or to one of its parents,
    /// or a keyword anywhere in it. One trailing dot on the host is ignored.
    pub fn matches(&self, host: &[u8]) -> Option<usize> {
        let host = host.strip_suffix(b".").unwrap_or(host);
        for m in self
            .automaton
            .try_find_overlapping_iter(Input::new(host))
            .ok()?
        {
            let id = m.pattern().as_usize();
            if self.is_keyword(id) {
                return Some(id);
            }
            // A domain matches only as a whole suffix that starts a label: "example.com" in
            // "a.example.com", not in "badexample.com" or "example.com.evil".
            if m.end() == host.len() && (m.start() == 0 || host.get(m.start() - 1) == Some(&b'.')) {
                return Some(id);
            }
        }
        None
    }

    /// [`matches`](Self::matches) on the host, then keywords in the path (request-target,
    /// query included). A path is also searched percent-decoded, as the server will read it,
    /// so "/p%6Frn" cannot hide "porn".
    pub fn matches_url(&self, host: &[u8], path: &[u8]) -> Option<usize> {
        if let Some(id) = self.matches(host) {
            return Some(id);
        }
        if self.max_keyword_len == 0 {
            return None;
        }
        if let Some(id) = self.keyword_in(path) {
            return Some(id);
        }
        if path.contains(&b'%') {
            return self.keyword_in_decoded(path);
        }
        None
    }

    fn keyword_in(&self, haystack: &[u8]) -> Option<usize> {
        self.automaton
            .try_find_overlapping_iter(Input::new(haystack))
            .ok()?
            .map(|m| m.pattern().as_usize())
            .find(|&id| self.is_keyword(id))
    }

    /// Decodes into a stack window; a window carries the tail of the previous one (one
    /// keyword length less a byte) so a keyword straddling two windows is still seen whole.
    fn keyword_in_decoded(&self, path: &[u8]) -> Option<usize> {
        let mut window = [0u8; DECODE_CHUNK];
        let keep = self.max_keyword_len.saturating_sub(1);
        let mut len = 0;
        let mut i = 0;
        while i < path.len() {
            let (b, used) = decode_at(path, i);
            i += used;
            if len == window.len() {
                if let Some(id) = self.keyword_in(&window) {
                    return Some(id);
                }
                window.copy_within(len - keep..len, 0);
                len = keep;
            }
            if let Some(slot) = window.get_mut(len) {
                *slot = b;
                len += 1;
            }
        }
        self.keyword_in(window.get(..len).unwrap_or_default())
    }
}

/// The byte at `i` of a percent-encoded string and how many input bytes it took. A '%' not
/// followed by two hex digits stands for itself, as servers read it.
fn decode_at(s: &[u8], i: usize) -> (u8, usize) {
    let b = s.get(i).copied().unwrap_or(0);
    if b == b'%' {
        if let (Some(hi), Some(lo)) = (
            s.get(i + 1).and_then(|&h| hex_value(h)),
            s.get(i + 2).and_then(|&l| hex_value(l)),
        ) {
            return (hi << 4 | lo, 3);
        }
    }
    (b, 1)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn normalize_domain(d: &str) -> String {
    let d = d.trim();
    let d = d.strip_prefix("*.").unwrap_or(d);
    let d = d.strip_prefix('.').unwrap_or(d);
    let d = d.strip_suffix('.').unwrap_or(d);
    d.to_ascii_lowercase()
}

/// Names hosts files map to loopback for the machine itself, not to block anything.
const LOCAL_NAMES: [&str; 12] = [
    "localhost",
    "localhost.localdomain",
    "local",
    "broadcasthost",
    "ip6-localhost",
    "ip6-loopback",
    "ip6-localnet",
    "ip6-mcastprefix",
    "ip6-allnodes",
    "ip6-allrouters",
    "ip6-allhosts",
    "0.0.0.0",
];

/// The domains in a block list, in hosts-file form ("0.0.0.0 ads.example.com", several names
/// a line allowed) or one domain a line; '#' starts a comment. Names are lowercased with a
/// trailing dot and a leading "*." dropped; localhost-style entries, addresses, and tokens that are not host
/// names are skipped.
pub fn parse_domain_list(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut tokens = line.split_whitespace().peekable();
        // A leading address makes it a hosts-file line; its names follow.
        if tokens.peek().is_some_and(|t| t.parse::<IpAddr>().is_ok()) {
            tokens.next();
        }
        for token in tokens {
            let name = token.strip_prefix("*.").unwrap_or(token);
            let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            if name.is_empty()
                || LOCAL_NAMES.contains(&name.as_str())
                || name.parse::<IpAddr>().is_ok()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            {
                continue;
            }
            out.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn matcher(domains: &[&str], keywords: &[&str]) -> DomainMatcher {
        DomainMatcher::new(&strings(domains), &strings(keywords)).unwrap()
    }

    #[test]
    fn domain_boundaries() {
        let m = matcher(&["example.com", "ads.net"], &[]);
        assert_eq!(m.matches(b"example.com"), Some(0));
        assert_eq!(m.matches(b"www.example.com"), Some(0));
        assert_eq!(m.matches(b"a.b.example.com"), Some(0));
        assert_eq!(m.matches(b"WWW.EXAMPLE.COM"), Some(0));
        assert_eq!(m.matches(b"example.com."), Some(0));
        assert_eq!(m.matches(b"x.ads.net"), Some(1));
        for host in [
            &b"badexample.com"[..],
            b"example.com.evil.org",
            b"example.co",
            b"xample.com",
            b"example.comm",
            b"example-com",
            b"com",
            b"",
            b".",
        ] {
            assert_eq!(m.matches(host), None, "{:?}", String::from_utf8_lossy(host));
        }
    }

    #[test]
    fn a_failed_boundary_does_not_hide_another_match() {
        // "example.com" occurs in "badexample.com" at a non-boundary; the list also holds
        // "badexample.com" itself, and a keyword overlapping both.
        let m = matcher(&["example.com", "badexample.com"], &[]);
        assert_eq!(m.matches(b"www.badexample.com"), Some(1));
        let m = matcher(&["example.com"], &["badex"]);
        assert_eq!(m.matches(b"badexample.com"), Some(1));
        // A domain that is a parent of another listed domain: either index is a match.
        let m = matcher(&["b.example.com", "example.com"], &[]);
        assert!(m.matches(b"a.b.example.com").is_some());
        assert_eq!(m.matches(b"c.example.com"), Some(1));
    }

    #[test]
    fn domain_entry_spellings() {
        let m = matcher(
            &[
                "*.Wild.example",
                ".dot.example",
                "trail.example.",
                "  sp.example ",
            ],
            &[],
        );
        assert_eq!(m.matches(b"wild.example"), Some(0));
        assert_eq!(m.matches(b"a.wild.example"), Some(0));
        assert_eq!(m.matches(b"dot.example"), Some(1));
        assert_eq!(m.matches(b"trail.example"), Some(2));
        assert_eq!(m.matches(b"x.sp.example"), Some(3));
    }

    #[test]
    fn keywords_anywhere() {
        let m = matcher(&["example.com"], &["casino", "Bet365"]);
        assert!(m.is_keyword(1) && !m.is_keyword(0));
        assert_eq!(m.len(), 3);
        assert_eq!(m.matches(b"onlinecasino.org"), Some(1));
        assert_eq!(m.matches(b"www.CASINO-royale.net"), Some(1));
        assert_eq!(m.matches(b"bet365.com"), Some(2));
        assert_eq!(m.matches(b"news.org"), None);
        assert_eq!(m.matches_url(b"news.org", b"/casino/today"), Some(1));
        assert_eq!(
            m.matches_url(b"news.org", b"/search?q=BET365+odds"),
            Some(2)
        );
        assert_eq!(m.matches_url(b"news.org", b"/sports"), None);
        // Domains count on the host only, never in the path.
        assert_eq!(m.matches_url(b"news.org", b"/example.com"), None);
        assert_eq!(m.matches_url(b"www.example.com", b"/"), Some(0));
    }

    #[test]
    fn keywords_in_encoded_paths() {
        let m = matcher(&[], &["casino"]);
        assert_eq!(m.matches_url(b"a.org", b"/c%61sino"), Some(0));
        assert_eq!(m.matches_url(b"a.org", b"/%63%41%53%49%4e%4F"), Some(0));
        assert_eq!(m.matches_url(b"a.org", b"/c%6"), None);
        assert_eq!(m.matches_url(b"a.org", b"/%zzcasin%"), None);
        // Straddling the decode windows, at every offset around the boundary.
        for pad in DECODE_CHUNK - 10..DECODE_CHUNK + 10 {
            let path = format!("/{}c%61sino", "%41".repeat(pad));
            assert_eq!(
                m.matches_url(b"a.org", path.as_bytes()),
                Some(0),
                "pad {pad}"
            );
            let path = format!("/{}c%61sin", "%41".repeat(pad));
            assert_eq!(m.matches_url(b"a.org", path.as_bytes()), None, "pad {pad}");
        }
    }

    #[test]
    fn build_errors_and_empty_lists() {
        assert!(matches!(
            DomainMatcher::new(&strings(&["ok.com", " . "]), &[]),
            Err(BuildError::EmptyEntry(1))
        ));
        assert!(matches!(
            DomainMatcher::new(&strings(&["*."]), &[]),
            Err(BuildError::EmptyEntry(0))
        ));
        assert!(matches!(
            DomainMatcher::new(&strings(&["a.com"]), &strings(&["x", "  "])),
            Err(BuildError::EmptyEntry(2))
        ));
        assert!(matches!(
            DomainMatcher::new(&[], &["k".repeat(MAX_KEYWORD_LEN + 1)]),
            Err(BuildError::EntryTooLong(0))
        ));
        assert!(matches!(
            DomainMatcher::new(&["d".repeat(254)], &[]),
            Err(BuildError::EntryTooLong(0))
        ));
        let empty = matcher(&[], &[]);
        assert!(empty.is_empty());
        assert_eq!(empty.matches(b"example.com"), None);
        assert_eq!(empty.matches_url(b"example.com", b"/%41"), None);
    }

    #[test]
    fn hosts_file_and_plain_lists() {
        let text = "\
# StevenBlack-style header
127.0.0.1 localhost
127.0.0.1 localhost.localdomain
255.255.255.255 broadcasthost
::1 localhost ip6-localhost ip6-loopback
fe80::1%lo0 localhost
0.0.0.0 0.0.0.0

0.0.0.0 Ads.Example.com
127.0.0.1 x.y # comment
0.0.0.0\ttracker.example.net   pixel.example.net
   plain.example.org.
*.wild.example
#commented.example
bad/entry.example
1.2.3.4
";
        assert_eq!(
            parse_domain_list(text),
            strings(&[
                "ads.example.com",
                "x.y",
                "tracker.example.net",
                "pixel.example.net",
                "plain.example.org",
                "wild.example",
            ])
        );
        let m = DomainMatcher::new(&parse_domain_list(text), &[]).unwrap();
        assert_eq!(m.matches(b"ads.example.com"), Some(0));
        assert_eq!(m.matches(b"deep.wild.example"), Some(5));
        assert_eq!(m.matches(b"localhost"), None);
    }

    proptest! {
        #[test]
        fn random_inputs_never_panic(
            host in proptest::collection::vec(any::<u8>(), 0..300),
            path in proptest::collection::vec(prop_oneof![Just(b'%'), any::<u8>()], 0..1500),
        ) {
            let m = matcher(&["example.com", "a"], &["%", "zz", "casino"]);
            let _ = m.matches(&host);
            let _ = m.matches_url(&host, &path);
        }

        /// A domain entry matches exactly the host itself and its subdomains.
        #[test]
        fn domain_rule_agrees_with_a_plain_check(
            entry in "[a-c]{1,3}(\\.[a-c]{1,3}){0,2}",
            host in "[a-c.]{0,12}",
        ) {
            let m = matcher(&[entry.as_str()], &[]);
            let h = host.strip_suffix('.').unwrap_or(&host);
            let want = h == entry || h.ends_with(&format!(".{entry}"));
            prop_assert_eq!(m.matches(host.as_bytes()).is_some(), want);
        }

        #[test]
        fn parse_domain_list_never_panics(text in "\\PC{0,200}") {
            for name in parse_domain_list(&text) {
                prop_assert!(!name.is_empty());
                prop_assert!(!name.bytes().any(|b| b.is_ascii_uppercase()));
            }
        }
    }
}
