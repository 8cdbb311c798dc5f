//! Newline-delimited JSON between a Durable Object and the isolate that asked it: one message a
//! line, read as the object's answer streams in (a legacy session's call, a bridged call).

use serde_json::Value;

/// One message as a line, newline included (JSON text holds no raw newline).
pub fn encode(message: &Value) -> Vec<u8> {
    let mut bytes = message.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// Splits an answer's chunks into lines as they arrive (a line may span chunks).
#[derive(Debug, Default)]
pub struct Lines {
    buf: Vec<u8>,
}

impl Lines {
    /// The lines `chunk` completes, trimmed; blank ones skipped.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line);
            if !text.trim().is_empty() {
                out.push(text.trim().to_string());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_come_whole_wherever_the_chunks_split() {
        let messages = [json!({"a": "é\n"}), json!([1, 2]), json!("x")];
        let bytes: Vec<u8> = messages.iter().flat_map(encode).collect();
        for split in 0..=bytes.len() {
            let mut r = Lines::default();
            let mut got = r.feed(&bytes[..split]);
            got.extend(r.feed(&bytes[split..]));
            let got: Vec<Value> = got.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
            assert_eq!(got, messages, "split at {split}");
        }
        assert!(Lines::default().feed(b"\n \n{\"unfinished\"").is_empty());
    }
}
