//! Fixed-layout records: one declaration gives both the decoder and the encoder.
//!
//! Every on-disk structure in this crate is declared once with [`on_disk_struct!`], listing
//! each field with its byte offset. The macro derives `decode` and `encode` from that single
//! list, so a structure cannot be parsed one way and written another, and a byte-exact round
//! trip holds by construction. Offsets are checked against the record size at compile time.

/// Byte order of a record. ext4 is little-endian; jbd2 is big-endian.
pub trait ByteOrder {
    fn get_u16(b: [u8; 2]) -> u16;
    fn get_u32(b: [u8; 4]) -> u32;
    fn get_u64(b: [u8; 8]) -> u64;
    fn put_u16(v: u16) -> [u8; 2];
    fn put_u32(v: u32) -> [u8; 4];
    fn put_u64(v: u64) -> [u8; 8];
}

/// Little-endian records (everything ext4 writes).
pub struct Le;
/// Big-endian records (everything jbd2 writes).
pub struct Be;

impl ByteOrder for Le {
    fn get_u16(b: [u8; 2]) -> u16 {
        u16::from_le_bytes(b)
    }
    fn get_u32(b: [u8; 4]) -> u32 {
        u32::from_le_bytes(b)
    }
    fn get_u64(b: [u8; 8]) -> u64 {
        u64::from_le_bytes(b)
    }
    fn put_u16(v: u16) -> [u8; 2] {
        v.to_le_bytes()
    }
    fn put_u32(v: u32) -> [u8; 4] {
        v.to_le_bytes()
    }
    fn put_u64(v: u64) -> [u8; 8] {
        v.to_le_bytes()
    }
}

impl ByteOrder for Be {
    fn get_u16(b: [u8; 2]) -> u16 {
        u16::from_be_bytes(b)
    }
    fn get_u32(b: [u8; 4]) -> u32 {
        u32::from_be_bytes(b)
    }
    fn get_u64(b: [u8; 8]) -> u64 {
        u64::from_be_bytes(b)
    }
    fn put_u16(v: u16) -> [u8; 2] {
        v.to_be_bytes()
    }
    fn put_u32(v: u32) -> [u8; 4] {
        v.to_be_bytes()
    }
    fn put_u64(v: u64) -> [u8; 8] {
        v.to_be_bytes()
    }
}

/// A value that occupies a fixed number of bytes in a record.
pub trait Field: Sized {
    const SIZE: usize;
    /// Reads from exactly `SIZE` bytes.
    fn read<E: ByteOrder>(bytes: &[u8]) -> Self;
    /// Writes into exactly `SIZE` bytes.
    fn write<E: ByteOrder>(&self, bytes: &mut [u8]);
}

impl Field for u8 {
    const SIZE: usize = 1;
    fn read<E: ByteOrder>(bytes: &[u8]) -> Self {
        bytes[0]
    }
    fn write<E: ByteOrder>(&self, bytes: &mut [u8]) {
        bytes[0] = *self;
    }
}

macro_rules! integer_field {
    ($ty:ty, $n:expr, $get:ident, $put:ident) => {
        impl Field for $ty {
            const SIZE: usize = $n;
            fn read<E: ByteOrder>(bytes: &[u8]) -> Self {
                let mut raw = [0u8; $n];
                raw.copy_from_slice(&bytes[..$n]);
                E::$get(raw)
            }
            fn write<E: ByteOrder>(&self, bytes: &mut [u8]) {
                bytes[..$n].copy_from_slice(&E::$put(*self));
            }
        }
    };
}
integer_field!(u16, 2, get_u16, put_u16);
integer_field!(u32, 4, get_u32, put_u32);
integer_field!(u64, 8, get_u64, put_u64);

/// Byte strings (UUIDs, names, opaque areas) are copied as they are, whatever the byte order.
impl<const N: usize> Field for [u8; N] {
    const SIZE: usize = N;
    fn read<E: ByteOrder>(bytes: &[u8]) -> Self {
        let mut out = [0u8; N];
        out.copy_from_slice(&bytes[..N]);
        out
    }
    fn write<E: ByteOrder>(&self, bytes: &mut [u8]) {
        bytes[..N].copy_from_slice(self);
    }
}

/// Arrays of 32-bit words (hash seed, journal backup, reserved areas).
impl<const N: usize> Field for [u32; N] {
    const SIZE: usize = 4 * N;
    fn read<E: ByteOrder>(bytes: &[u8]) -> Self {
        let mut out = [0u32; N];
        for (i, word) in out.iter_mut().enumerate() {
            *word = u32::read::<E>(&bytes[4 * i..]);
        }
        out
    }
    fn write<E: ByteOrder>(&self, bytes: &mut [u8]) {
        for (i, word) in self.iter().enumerate() {
            word.write::<E>(&mut bytes[4 * i..]);
        }
    }
}

/// Declares an on-disk record: a struct with one public field per on-disk field, plus
/// `SIZE`, `decode(&[u8; SIZE])` and `encode(&mut [u8; SIZE])`.
macro_rules! on_disk_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident ($order:ty, $size:expr) {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $off:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// Size of the record on disk, in bytes.
            pub const SIZE: usize = $size;

            /// Decodes every field from the record's bytes.
            pub fn decode(bytes: &[u8; $size]) -> Self {
                use $crate::codec::Field;
                Self { $( $field: <$ty as Field>::read::<$order>(&bytes[$off..]), )* }
            }

            /// Encodes every field into the record's bytes; bytes not covered by a field are
            /// left as they are.
            pub fn encode(&self, bytes: &mut [u8; $size]) {
                use $crate::codec::Field;
                $( self.$field.write::<$order>(&mut bytes[$off..]); )*
            }
        }

        // Every field must lie inside the record.
        #[allow(clippy::int_plus_one)]
        const _: () = {
            use $crate::codec::Field;
            $( assert!($off + <$ty as Field>::SIZE <= $size); )*
        };
    };
}
pub(crate) use on_disk_struct;

/// Copies the first `N` bytes of `bytes` into an array, or `None` if it is shorter.
pub fn prefix<const N: usize>(bytes: &[u8]) -> Option<&[u8; N]> {
    bytes.get(..N).and_then(|b| b.try_into().ok())
}

/// Reads a little-endian u16 at `off`, or `None` past the end.
pub fn le16(bytes: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(*prefix::<2>(bytes.get(off..)?)?))
}

/// Reads a little-endian u32 at `off`, or `None` past the end.
pub fn le32(bytes: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(*prefix::<4>(bytes.get(off..)?)?))
}
