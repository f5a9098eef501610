//! Just enough MessagePack to read the AMDGPU code object metadata note
//! (`NT_AMDGPU_METADATA`): a bounded, allocation-limited decoder that never panics.

/// A decoded value; numbers other than unsigned integers, and binary/ext payloads, are kept
/// as `Other` because the metadata fields we read never use them.
#[derive(Debug, PartialEq)]
pub(crate) enum Value<'a> {
    Str(&'a [u8]),
    Uint(u64),
    Array(Vec<Value<'a>>),
    Map(Vec<(Value<'a>, Value<'a>)>),
    Other,
}

impl<'a> Value<'a> {
    /// The value under string key `key`, if this is a map.
    pub(crate) fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| *k == Value::Str(key.as_bytes()))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::Str(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }
}

/// Nesting deeper than this is refused (the metadata nests about four levels).
const MAX_DEPTH: usize = 32;

/// Decodes one value from the start of `input`; `None` on any malformed or truncated data.
pub(crate) fn decode(input: &[u8]) -> Option<Value<'_>> {
    let mut reader = Reader { input, pos: 0 };
    reader.value(0)
}

struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(len)?;
        let bytes = self.input.get(self.pos..end)?;
        self.pos = end;
        Some(bytes)
    }

    fn uint(&mut self, len: usize) -> Option<u64> {
        Some(
            self.take(len)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        )
    }

    fn len(&mut self, len_bytes: usize) -> Option<usize> {
        usize::try_from(self.uint(len_bytes)?).ok()
    }

    fn value(&mut self, depth: usize) -> Option<Value<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let tag = *self.take(1)?.first()?;
        Some(match tag {
            0x00..=0x7f => Value::Uint(u64::from(tag)),
            0x80..=0x8f => self.map(usize::from(tag & 0x0f), depth)?,
            0x90..=0x9f => self.array(usize::from(tag & 0x0f), depth)?,
            0xa0..=0xbf => Value::Str(self.take(usize::from(tag & 0x1f))?),
            0xc0 | 0xc2 | 0xc3 => Value::Other,
            0xc4..=0xc6 => {
                let len = self.len(1 << (tag - 0xc4))?;
                self.take(len)?;
                Value::Other
            }
            0xc7..=0xc9 => {
                let len = self.len(1 << (tag - 0xc7))?;
                self.take(len.checked_add(1)?)?;
                Value::Other
            }
            0xca => {
                self.take(4)?;
                Value::Other
            }
            0xcb => {
                self.take(8)?;
                Value::Other
            }
            0xcc..=0xcf => Value::Uint(self.uint(1 << (tag - 0xcc))?),
            0xd0..=0xd3 => {
                self.take(1 << (tag - 0xd0))?;
                Value::Other
            }
            0xd4..=0xd8 => {
                self.take(1 + (1 << (tag - 0xd4)))?;
                Value::Other
            }
            0xd9..=0xdb => {
                let len = self.len(1 << (tag - 0xd9))?;
                Value::Str(self.take(len)?)
            }
            0xdc | 0xdd => {
                let len = self.len(2 << (tag - 0xdc))?;
                self.array(len, depth)?
            }
            0xde | 0xdf => {
                let len = self.len(2 << (tag - 0xde))?;
                self.map(len, depth)?
            }
            0xc1 => return None,         // never used
            0xe0..=0xff => Value::Other, // negative fixint
        })
    }

    /// Capacity is capped by the bytes left (every element takes at least one), so a
    /// forged count cannot make us allocate more than the input's size.
    fn remaining(&self) -> usize {
        self.input.len().saturating_sub(self.pos)
    }

    fn array(&mut self, count: usize, depth: usize) -> Option<Value<'a>> {
        let mut items = Vec::with_capacity(count.min(self.remaining()));
        for _ in 0..count {
            items.push(self.value(depth + 1)?);
        }
        Some(Value::Array(items))
    }

    fn map(&mut self, count: usize, depth: usize) -> Option<Value<'a>> {
        let mut entries = Vec::with_capacity(count.min(self.remaining() / 2));
        for _ in 0..count {
            let key = self.value(depth + 1)?;
            let value = self.value(depth + 1)?;
            entries.push((key, value));
        }
        Some(Value::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_nested_maps() {
        // {"a": [1, 300, "xy"], "b": {"c": -1, "d": true}}
        let bytes = [
            0x82, 0xa1, b'a', 0x93, 0x01, 0xcd, 0x01, 0x2c, 0xa2, b'x', b'y', 0xa1, b'b', 0x82,
            0xa1, b'c', 0xff, 0xa1, b'd', 0xc3,
        ];
        let value = decode(&bytes).unwrap();
        assert_eq!(
            value.get("a"),
            Some(&Value::Array(vec![
                Value::Uint(1),
                Value::Uint(300),
                Value::Str(b"xy")
            ]))
        );
        assert_eq!(value.get("b").and_then(|b| b.get("c")), Some(&Value::Other));
        assert_eq!(value.get("b").and_then(|b| b.get("d")), Some(&Value::Other));
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_none(), "truncated at {len}");
        }
    }

    #[test]
    fn refuses_forged_counts_and_deep_nesting() {
        assert!(decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_none());
        assert!(decode(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'x']).is_none());
        assert!(decode(&[0x91; 100]).is_none());
    }
}
