//! Where the peer histories with known verdicts are (`shared/peer-histories/porcupine/`,
//! outside the repository): for the Porcupine verdict test and the benchmark.

use std::path::{Path, PathBuf};

/// The Porcupine folder, if found: `$LOCKSMITH_SHARED`, else `<repo>/../shared` (as CI lays it
/// out), else `<repo>/../../shared` (a worktree under `<root>/wt/<name>`). A folder counts
/// only when it holds `verdicts.csv`.
pub fn porcupine_dir() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut candidates = Vec::new();
    if let Ok(shared) = std::env::var("LOCKSMITH_SHARED") {
        candidates.push(PathBuf::from(shared));
    }
    candidates.push(repo.join("../shared"));
    candidates.push(repo.join("../../shared"));
    candidates
        .into_iter()
        .map(|shared| shared.join("peer-histories/porcupine"))
        .find(|dir| dir.join("verdicts.csv").is_file())
}
