//! [`Text`], the cells of a paired history, and the [`Interner`] that shares them.
//!
//! A long history repeats a handful of cell values a million times (`acquire`, `k17`,
//! `10000`, `n1`, `busy`). An [`crate::Operation`] holds its cells as [`Text`]: a shared,
//! immutable string, so that a repeated value is stored once (as long as it stays in its
//! [`Interner`] slot) and copying a cell is a reference-count increment, not an
//! allocation. The empty cell, the commonest of all, is no allocation at all.
//!
//! `Text` reads as a `&str` (it derefs to one, and compares with `str`, `&str` and
//! `String`), so code written against `String` cells mostly reads the same.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use crate::hash::FastHasher;

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

/// Hands out shared [`Text`]s, so that a history's repeated cells share one allocation.
///
/// It is a bounded cache, not a table of every string seen: [`INTERNER_SLOTS`] slots,
/// each holding the last text whose hash fell on it. The few values a lock history repeats
/// a million times (`acquire`, the keys, `10000`, `n1`, `busy`) stay in their slots and are
/// shared; a value seen once (the unique value of each write) costs one allocation, as a
/// `String` did, and no table grows with it. (A hash set of every distinct value was
/// tried first: on 1M ops its 300k unique write values made each lookup a cache miss, and
/// interning cost 9 % of `locksmith check`.) Two equal texts from different slots or
/// evictions are still equal: `Text` compares contents.
#[derive(Debug)]
pub struct Interner {
    slots: Box<[Text]>,
}

/// How many slots an [`Interner`] has.
pub const INTERNER_SLOTS: usize = 1024;

impl Default for Interner {
    fn default() -> Interner {
        Interner {
            slots: vec![Text::EMPTY; INTERNER_SLOTS].into_boxed_slice(),
        }
    }
}

impl Interner {
    /// A text equal to `text`: the one in its slot when that holds `text`, else a new one
    /// (which then takes the slot).
    pub fn intern(&mut self, text: &str) -> Text {
        if text.is_empty() {
            return Text::EMPTY;
        }
        let mut hasher = FastHasher::default();
        hasher.write(text.as_bytes());
        // The multiply of the hash mixes into its top bits: take the slot from those.
        let slot = (hasher.finish() >> (64 - INTERNER_SLOTS.trailing_zeros())) as usize;
        let held = &mut self.slots[slot];
        if held.as_str() != text {
            *held = Text::from(text);
        }
        held.clone()
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
        assert_eq!(a, Text::from("k17"));
        assert_eq!(a, "k17");
        let (a_text, b_text) = (Text::from("a"), Text::from("b"));
        assert!(a_text < b_text);
        assert_eq!(interner.intern(""), Text::EMPTY);
        assert_eq!(Text::EMPTY.as_str(), "");
        assert_eq!(format!("{a} {a:?}"), "k17 \"k17\"");
    }

    #[test]
    fn an_evicted_text_is_still_equal_to_its_replacement() {
        // The interner is a bounded cache: many distinct values evict each other, and
        // every text handed out keeps its contents.
        let mut interner = Interner::default();
        let texts: Vec<(String, Text)> = (0..10 * INTERNER_SLOTS)
            .map(|i| (i.to_string(), interner.intern(&i.to_string())))
            .collect();
        for (string, text) in &texts {
            assert_eq!(text, string);
            assert_eq!(interner.intern(string), *text);
        }
    }
}
