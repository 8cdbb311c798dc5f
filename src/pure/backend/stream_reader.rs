//! A streamed backend answer, read event by event by the rules of its kind: the one place that
//! dispatches over the kinds that stream.

use crate::pure::outcome::{Outcome, Signal};

use super::dify::stream::DifyStream;
use super::http_tool::stream::HttpToolStream;

/// The reader of a streamed answer, by backend kind.
#[derive(Debug)]
pub enum StreamReader {
    Dify(DifyStream),
    Tool(HttpToolStream),
}

impl StreamReader {
    /// `data` as the SSE parser hands it over: bytes, UTF-8 checked by the reader as it reads.
    pub fn on_event(&mut self, data: &[u8], out: &mut Vec<Signal>) {
        match self {
            StreamReader::Dify(s) => s.on_event(data, out),
            StreamReader::Tool(s) => s.on_event(data, out),
        }
    }

    pub fn is_done(&self) -> bool {
        match self {
            StreamReader::Dify(s) => s.is_done(),
            StreamReader::Tool(s) => s.is_done(),
        }
    }

    /// The backend's id for the run, where it has one to stop it by.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            StreamReader::Dify(s) => s.task_id(),
            StreamReader::Tool(_) => None,
        }
    }

    pub fn finish(self) -> Outcome {
        match self {
            StreamReader::Dify(s) => s.finish(),
            StreamReader::Tool(s) => s.finish(),
        }
    }
}
