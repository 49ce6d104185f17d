//! [`Text`], the cells of a paired history, and the [`Interner`] that shares them.
//!
//! A long history repeats a handful of cell values a million times (`acquire`, `k17`,
//! `10000`, `n1`, `busy`). An [`crate::Operation`] holds its cells as [`Text`]: a shared,
//! immutable string, so that each distinct value is stored once per history and copying a
//! cell is a reference-count increment, not an allocation. The empty cell, the commonest
//! of all, is no allocation at all.
//!
//! `Text` reads as a `&str` (it derefs to one, and compares with `str`, `&str` and
//! `String`), so code written against `String` cells mostly reads the same.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use crate::hash::FastBuildHasher;

/// An immutable, cheaply cloned string: one cell of a paired history.
///
/// Equality, ordering and hashing are those of the `str` it holds (so a
/// `HashMap<Text, _>` can be looked up with a `&str`).
#[derive(Clone, Default)]
pub struct Text(Option<Arc<str>>);

impl Text {
    /// The empty text (no allocation).
    pub const EMPTY: Text = Text(None);

    /// The string.
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        if text.is_empty() {
            Text::EMPTY
        } else {
            Text(Some(Arc::from(text)))
        }
    }
}

impl From<String> for Text {
    fn from(text: String) -> Text {
        Text::from(text.as_str())
    }
}

impl From<Text> for String {
    fn from(text: Text) -> String {
        text.as_str().to_owned()
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        match (&self.0, &other.0) {
            // Interned cells of one history share their allocation: no bytes to compare.
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) => true,
            _ => self.as_str() == other.as_str(),
        }
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Text> for str {
    fn eq(&self, other: &Text) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        *self == other.as_str()
    }
}

impl Hash for Text {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Text) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Text) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

/// Hands out one shared [`Text`] per distinct string, so that a history's repeated cells
/// share one allocation.
///
/// It holds every distinct string it has seen, until it is dropped: a history whose cells
/// are all distinct (unique values per write) costs one entry per cell, as `String` cells
/// did.
#[derive(Debug, Default)]
pub struct Interner {
    seen: HashSet<Text, FastBuildHasher>,
}

impl Interner {
    /// The shared text equal to `text`, stored on first sight.
    pub fn intern(&mut self, text: &str) -> Text {
        if text.is_empty() {
            return Text::EMPTY;
        }
        if let Some(shared) = self.seen.get(text) {
            return shared.clone();
        }
        let shared = Text::from(text);
        self.seen.insert(shared.clone());
        shared
    }

    /// How many distinct non-empty strings it holds.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_cells_share_one_allocation_and_compare_as_strings() {
        // Issue 12: interned keys and values, no String per cell.
        let mut interner = Interner::default();
        let a = interner.intern("k17");
        let b = interner.intern(&String::from("k17"));
        assert!(Arc::ptr_eq(a.0.as_ref().unwrap(), b.0.as_ref().unwrap()));
        assert_eq!(interner.len(), 1);
        assert_eq!(a, Text::from("k17"));
        assert_eq!(a, "k17");
        assert!(Text::from("a") < Text::from("b"));
        assert_eq!(interner.intern(""), Text::EMPTY);
        assert_eq!(Text::EMPTY.as_str(), "");
        assert_eq!(format!("{a} {a:?}"), "k17 \"k17\"");
    }
}
