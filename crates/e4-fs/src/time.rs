//! The current time, as inode timestamps store it.

use std::time::{SystemTime, UNIX_EPOCH};

use e4_format::inode::Timestamp;

pub(crate) fn now() -> Timestamp {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            seconds: d.as_secs() as i64,
            nanoseconds: d.subsec_nanos(),
        },
        Err(before) => {
            let d = before.duration();
            Timestamp {
                seconds: -(d.as_secs() as i64),
                nanoseconds: 0,
            }
        }
    }
}
