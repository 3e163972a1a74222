//! `DropReason::OUTSIDE_PIPELINE` names exactly the reasons the pipeline's source never
//! decides: the drop log and the drop capture refuse those, so a reason the pipeline starts
//! (or stops) deciding must move in (or out of) the list with it.

use std::fs;
use std::path::Path;

use pipeline::DropReason;

fn sources(dir: &Path, out: &mut String) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") && !path.ends_with("verdict.rs") {
            out.push_str(&fs::read_to_string(&path).unwrap());
        }
    }
}

#[test]
fn the_reasons_outside_the_pipeline_are_those_its_source_never_names() {
    let mut text = String::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut text,
    );
    let named = |variant: &str| {
        let path = format!("DropReason::{variant}");
        text.match_indices(&path).any(|(at, _)| {
            let next = text[at + path.len()..].chars().next();
            !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    for reason in DropReason::ALL {
        let variant = format!("{reason:?}");
        assert_eq!(
            named(&variant),
            reason.decided_by_pipeline(),
            "{variant}: named in pipeline/src {}, but {} DropReason::OUTSIDE_PIPELINE",
            named(&variant),
            if reason.decided_by_pipeline() {
                "not in"
            } else {
                "in"
            },
        );
    }
}
