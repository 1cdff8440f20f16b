//! What a test's code logs, kept for the test to read: a `tracing_subscriber` writer into a
//! shared buffer. Every clone writes into the same buffer, so the test keeps one clone and gives
//! another to the subscriber it installs.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// A `MakeWriter` into a shared buffer: `tracing_subscriber::fmt().with_writer(logs.clone())`,
/// then [`CapturedLogs::text`].
#[derive(Clone, Debug, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .expect("the logs are UTF-8")
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
