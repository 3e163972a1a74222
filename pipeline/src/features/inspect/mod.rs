//! Content inspection for domain and keyword blocking (parental control, ad and tracker
//! lists): the name a flow is about, read from its first payload bytes, and the lists it is
//! matched against.
//!
//! - [`dns`]: the QNAME of a DNS query, and the NXDOMAIN answer that refuses it.
//! - [`tls`]: the server name (SNI) of a TLS ClientHello, read across segments and records.
//! - [`http`]: the host and path of an HTTP/1.x request, read across segments.
//! - [`matcher`]: domain and keyword lists, one automaton for all.
//!
//! The parsers read untrusted bytes on the per-packet path, so they neither allocate nor
//! panic, and every length they follow is checked against what holds it. Names come out
//! lowercase and without a trailing dot, the form the matcher's domains are kept in.
//! Building a [`DomainMatcher`] allocates; matching does not.
//!
//! What none of this sees: DNS over HTTPS or TLS, QUIC (its ClientHello is encrypted with
//! keys any observer can derive, but that is another parser), and the inner name of
//! Encrypted Client Hello.

pub mod dns;
pub mod http;
pub mod matcher;
pub mod tls;

pub use self::http::{HttpScanner, HttpState, Method};
pub use self::matcher::{parse_domain_list, BuildError, DomainMatcher};
pub use self::tls::{ClientHelloScanner, SniResult};
