//! Reading structured values out of a fuzz input: the new targets take several fields from one
//! byte string (a length byte, then that many bytes), so libFuzzer's mutations reach each one.

/// A cursor over an input; reads past its end give zeros and empty strings.
pub struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { rest: data }
    }

    pub fn byte(&mut self) -> u8 {
        let (first, rest) = self.rest.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.rest = rest;
        first
    }

    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = tail;
        head
    }

    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let got = self.bytes(N);
        out[..got.len()].copy_from_slice(got);
        out
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// A length byte, then that many bytes as text (invalid UTF-8 replaced).
    pub fn text(&mut self) -> String {
        let n = self.byte() as usize;
        String::from_utf8_lossy(self.bytes(n)).into_owned()
    }

    /// Whatever is left, as text.
    pub fn rest_text(&mut self) -> String {
        let all = std::mem::take(&mut self.rest);
        String::from_utf8_lossy(all).into_owned()
    }
}

/// `token` with one byte changed (at `pos`, modulo its length, to `to`), or cut short or
/// lengthened, as `how` says; `None` when the change leaves it as it was or is not UTF-8.
pub fn tampered(token: &str, how: u8, pos: u8, to: u8) -> Option<String> {
    let mut b = token.as_bytes().to_vec();
    if b.is_empty() {
        return None;
    }
    let at = pos as usize % b.len();
    match how % 4 {
        0 | 1 => b[at] = to,
        2 => b.truncate(at),
        _ => b.insert(at, to),
    }
    String::from_utf8(b).ok().filter(|t| t != token)
}
