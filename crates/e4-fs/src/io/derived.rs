//! A structure a mechanism derived from a cached block's bytes, kept beside them so that
//! later looks at the block need not derive it again: a directory leaf's index
//! (`dir/leaf_index.rs`). The store drops it whenever the bytes change, but for the edits
//! made through [`MetaIo::modify_with_derived`](crate::io::meta_io::MetaIo), which keep it
//! true of what they leave. It is typed by the mechanism that made it: this layer only
//! keeps it.

use std::any::Any;
use std::sync::OnceLock;

/// Where a block's derived structure is kept: empty until a look makes it.
#[derive(Default)]
pub struct Derived(OnceLock<Box<dyn Any + Send + Sync>>);

impl Derived {
    /// The structure, made by `make` if none is kept (one maker at a time; the others wait
    /// for it); `None` if a structure of another type is kept.
    pub(crate) fn get_or_make<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Option<&T> {
        self.0.get_or_init(|| Box::new(make())).downcast_ref()
    }

    /// The structure, if one of this type is kept.
    pub(crate) fn get<T: Any>(&self) -> Option<&T> {
        self.0.get()?.downcast_ref()
    }

    /// The structure, if one of this type is kept, for an edit that keeps it true.
    pub(crate) fn get_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.0.get_mut()?.downcast_mut()
    }

    /// Drops the structure (the bytes changed without it).
    pub(crate) fn clear(&mut self) {
        self.0.take();
    }
}
