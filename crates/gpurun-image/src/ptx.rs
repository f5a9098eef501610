//! PTX text: module directives, kernels (`.entry`) and module-scope `.global`/`.const`
//! variables with their sizes and statically known initial bytes.
//!
//! This is not a PTX assembler. It reads the module scope only, skips function bodies by
//! brace matching, and reports anything it cannot make sense of at module scope as
//! [`ImageError::BadPtx`] with the line number, so a bad file is caught before the driver's
//! JIT sees it.

use crate::{Global, GlobalInit, ImageError, KernelParam, ParamKind};

/// What the PTX module scope declares.
#[derive(Debug, Default)]
pub(crate) struct PtxModule {
    pub version: Option<(u32, u32)>,
    pub target: Option<String>,
    pub address_size: Option<u32>,
    pub kernels: Vec<String>,
    /// Each kernel's block-size bound: the product of its `.maxntid` (or `.reqntid`) dimensions.
    pub max_threads: Vec<(String, u32)>,
    /// Each kernel's declared parameters (see [`entry_params`]), where its list parses.
    pub params: Vec<(String, EntryParams)>,
    pub globals: Vec<Global>,
}

/// True when `text` looks like PTX: the first directive, after comments, is `.version`.
pub(crate) fn looks_like_ptx(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.split_once('\n').map_or("", |(_, tail)| tail);
        } else if let Some(after) = rest.strip_prefix("/*") {
            match after.split_once("*/") {
                Some((_, tail)) => rest = tail,
                None => return false,
            }
        } else {
            return rest.starts_with(".version");
        }
    }
}

fn bad(line: usize, reason: impl Into<String>) -> ImageError {
    ImageError::BadPtx {
        line,
        reason: reason.into(),
    }
}

/// Replaces comments with spaces, keeping newlines so line numbers stay right.
fn strip_comments(text: &str) -> Result<String, ImageError> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut line = 1;
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            in_string = false; // PTX strings never span lines; do not let one swallow the file
            out.push(c);
            continue;
        }
        if in_string {
            if c == '\\' {
                out.push(c);
                if let Some(&next) = chars.peek() {
                    if next != '\n' {
                        out.push(next);
                        chars.next();
                    }
                }
                continue;
            }
            in_string = c != '"';
            out.push(c);
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                let start = line;
                chars.next();
                let mut closed = false;
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        out.push('\n');
                    }
                    if prev == '*' && c == '/' {
                        closed = true;
                        break;
                    }
                    prev = c;
                }
                if !closed {
                    return Err(bad(start, "unterminated `/*` comment"));
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

/// Directives that end at the end of their line instead of at a `;`.
const LINE_DIRECTIVES: [&str; 4] = [".version", ".target", ".address_size", ".file"];

fn is_line_directive(stmt: &str) -> bool {
    let first = stmt.split_whitespace().next().unwrap_or("");
    LINE_DIRECTIVES.contains(&first)
}

/// Parses the module scope of PTX text.
pub(crate) fn parse(text: &str) -> Result<PtxModule, ImageError> {
    let text = strip_comments(text)?;
    let mut module = PtxModule::default();
    let mut stmt = String::new();
    let mut stmt_line = 1;
    let mut line = 1;
    let mut init_depth = 0usize;
    let mut in_string = false;
    let mut chars = text.chars();

    while let Some(c) = chars.next() {
        if in_string {
            if c == '\n' {
                line += 1;
                in_string = false;
            } else if c == '"' {
                in_string = false;
            }
            stmt.push(c);
            continue;
        }
        if stmt.trim().is_empty() && !c.is_whitespace() {
            stmt_line = line;
        }
        match c {
            '"' => {
                in_string = true;
                stmt.push(c);
            }
            '\n' => {
                line += 1;
                if init_depth == 0 && is_line_directive(&stmt) {
                    statement(&mut module, &stmt, stmt_line)?;
                    stmt.clear();
                } else {
                    stmt.push(' ');
                }
            }
            '{' if init_depth > 0 || stmt.trim_end().ends_with('=') => {
                init_depth += 1;
                stmt.push(c);
            }
            '{' => {
                // A body (function, `.section`, or a bare block): the text so far is its header.
                if !stmt.trim().is_empty() {
                    statement(&mut module, &stmt, stmt_line)?;
                }
                stmt.clear();
                let open_line = line;
                let mut depth = 1usize;
                let mut body_string = false;
                for c in chars.by_ref() {
                    match c {
                        '\n' => {
                            line += 1;
                            body_string = false;
                        }
                        '"' => body_string = !body_string,
                        '{' if !body_string => depth += 1,
                        '}' if !body_string => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                }
                if depth != 0 {
                    return Err(bad(open_line, "unterminated `{` block"));
                }
            }
            '}' if init_depth > 0 => {
                init_depth -= 1;
                stmt.push(c);
            }
            '}' => return Err(bad(line, "unexpected `}`")),
            ';' if init_depth > 0 => return Err(bad(line, "`;` inside an initializer")),
            ';' => {
                statement(&mut module, &stmt, stmt_line)?;
                stmt.clear();
            }
            _ => stmt.push(c),
        }
    }
    if init_depth > 0 {
        return Err(bad(stmt_line, "unterminated initializer"));
    }
    if !stmt.trim().is_empty() {
        if is_line_directive(&stmt) {
            statement(&mut module, &stmt, stmt_line)?;
        } else {
            return Err(bad(stmt_line, "statement does not end with `;`"));
        }
    }
    if module.version.is_none() {
        return Err(bad(1, "no `.version` directive"));
    }
    if module.target.is_none() {
        return Err(bad(1, "no `.target` directive"));
    }
    Ok(module)
}

fn statement(module: &mut PtxModule, stmt: &str, line: usize) -> Result<(), ImageError> {
    let tokens: Vec<&str> = stmt.split_whitespace().collect();
    let Some(&first) = tokens.first() else {
        return Ok(());
    };
    match first {
        ".version" => {
            let value = tokens.get(1).copied().unwrap_or("");
            let parsed = value
                .split_once('.')
                .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
            match parsed {
                Some(v) if tokens.len() == 2 => module.version = Some(v),
                _ => return Err(bad(line, format!("bad `.version` `{}`", stmt.trim()))),
            }
            return Ok(());
        }
        ".target" => {
            let rest = tokens[1..].join(" ");
            let target = rest.split(',').next().unwrap_or("").trim();
            if target.is_empty() {
                return Err(bad(line, "`.target` names no architecture"));
            }
            module.target = Some(target.to_owned());
            return Ok(());
        }
        ".address_size" => {
            match tokens.get(1).and_then(|t| t.parse().ok()) {
                Some(size @ (32 | 64)) if tokens.len() == 2 => module.address_size = Some(size),
                _ => return Err(bad(line, format!("bad `.address_size` `{}`", stmt.trim()))),
            }
            return Ok(());
        }
        ".file" => return Ok(()),
        _ => {}
    }
    if module.version.is_none() {
        return Err(bad(line, "`.version` must come first"));
    }
    // Declarations of things defined elsewhere define nothing here.
    if tokens.contains(&".extern") {
        return Ok(());
    }
    if let Some(pos) = stmt.find(".entry") {
        let after = stmt[pos + ".entry".len()..].trim_start();
        let name: String = after
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '(')
            .collect();
        if !is_identifier(&name) {
            return Err(bad(line, format!("bad kernel name `{name}`")));
        }
        if let Some(bound) = block_bound(after) {
            module.max_threads.push((name.clone(), bound));
        }
        if let Some(params) = entry_params(after) {
            module.params.push((name.clone(), params));
        }
        if !module.kernels.contains(&name) {
            module.kernels.push(name);
        }
        return Ok(());
    }
    if tokens.contains(&".func") {
        return Ok(());
    }
    let space = tokens
        .iter()
        .take_while(|t| !t.contains('='))
        .find(|t| **t == ".global" || **t == ".const");
    if let Some(space) = space {
        variable(module, stmt, space, line)?;
    }
    Ok(())
}

/// What a kernel's `.param` list declares.
#[derive(Debug, PartialEq)]
pub(crate) struct EntryParams {
    /// Where the last parameter ends, each placed at its alignment (`.align N`, else its type's
    /// size), with no padding after the last.
    pub bytes: u64,
    /// Each parameter's kind and size, without a name (PTX's are `k_param_0`, ...); a pointer's
    /// size is 0, as PTX does not say what it points at.
    pub params: Vec<KernelParam>,
}

/// The parameters of a kernel header (everything after `.entry`); `None` when one does not
/// parse (left to ptxas to reject).
fn entry_params(header: &str) -> Option<EntryParams> {
    let mut declared = EntryParams {
        bytes: 0,
        params: Vec::new(),
    };
    // A kernel without parameters may have no list at all (`.entry k {`).
    let Some(open) = header.find('(') else {
        return Some(declared);
    };
    let list = header[open + 1..].split(')').next()?;
    for param in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let words: Vec<&str> = param.split_whitespace().collect();
        if words.first() != Some(&".param") {
            return None;
        }
        // Parameters may also be packed half pairs, which variables here never are.
        let param_type = |word: &str| match word {
            ".f16x2" | ".bf16x2" => Some(4),
            _ => type_size(word).map(|(size, _)| size),
        };
        let type_at = words.iter().position(|word| param_type(word).is_some())?;
        let element = param_type(words[type_at])?;
        let name = words.last()?;
        let count = match name.split_once('[') {
            Some((_, rest)) => Some(rest.strip_suffix(']')?.parse::<u64>().ok()?),
            None => None,
        };
        // `.param .align 8 .b8 x[12]` aligns the parameter; an `.align` after `.ptr` (`.param
        // .u64 .ptr .align 1 p`) is the pointee's and leaves the parameter at its type's size.
        let align = match words[..type_at].iter().position(|word| *word == ".align") {
            Some(at) => words.get(at + 1)?.parse::<u64>().ok()?,
            None => element,
        };
        let size = element.checked_mul(count.unwrap_or(1))?;
        declared.bytes = declared.bytes.checked_next_multiple_of(align.max(1))? + size;
        let kind = match (count, words[type_at]) {
            (Some(_), _) => ParamKind::Other,
            _ if words.contains(&".ptr") => ParamKind::Pointer,
            (None, ".f32" | ".f64") => ParamKind::Float,
            (None, ty) if ty.starts_with(".f") || ty.starts_with(".bf") => ParamKind::Other,
            (None, _) => ParamKind::Integer,
        };
        declared.params.push(KernelParam {
            name: String::new(),
            kind,
            size: if kind == ParamKind::Pointer {
                0
            } else {
                u32::try_from(size).ok()?
            },
            len: Vec::new(),
        });
    }
    Some(declared)
}

/// The block-size bound a kernel header (everything after `.entry`, up to its body) declares:
/// the product of `.maxntid` dimensions, else of `.reqntid`; `None` without either or when a
/// dimension does not parse (left to ptxas to reject).
fn block_bound(header: &str) -> Option<u32> {
    let params_end = header.find(')').map_or(0, |end| end + 1);
    let directives = &header[params_end..];
    [".maxntid", ".reqntid"].iter().find_map(|directive| {
        let at = directives.find(directive)?;
        let list = directives[at + directive.len()..]
            .split(['.', '{', ';'])
            .next()?;
        let mut product: u32 = 1;
        let mut count = 0;
        for dim in list.split(',') {
            product = product.checked_mul(dim.trim().parse().ok()?)?;
            count += 1;
        }
        (1..=3).contains(&count).then_some(product)
    })
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || "_$%".contains(c))
        && chars.all(|c| c.is_ascii_alphanumeric() || "_$".contains(c))
}

/// Element size in bytes of a PTX fundamental type, and whether it is a float.
fn type_size(token: &str) -> Option<(u64, bool)> {
    Some(match token {
        ".b8" | ".u8" | ".s8" => (1, false),
        ".b16" | ".u16" | ".s16" => (2, false),
        ".f16" | ".bf16" => (2, true),
        ".b32" | ".u32" | ".s32" => (4, false),
        ".f32" => (4, true),
        ".b64" | ".u64" | ".s64" => (8, false),
        ".f64" => (8, true),
        _ => return None,
    })
}

fn variable(
    module: &mut PtxModule,
    stmt: &str,
    space: &str,
    line: usize,
) -> Result<(), ImageError> {
    let (decl, init) = match stmt.split_once('=') {
        Some((decl, init)) => (decl, Some(init.trim())),
        None => (stmt, None),
    };
    let tokens: Vec<&str> = decl.split_whitespace().collect();
    let mut lanes = 1u64;
    let mut elem = None;
    let mut declarators_at = None;
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i];
        match token {
            ".align" => i += 1, // skip its operand
            ".v2" => lanes = 2,
            ".v4" => lanes = 4,
            ".v8" => lanes = 8,
            _ => {
                if let Some(size) = type_size(token) {
                    elem = Some(size);
                    declarators_at = Some(i + 1);
                    break;
                }
            }
        }
        i += 1;
    }
    let (Some((elem_size, is_float)), Some(at)) = (elem, declarators_at) else {
        return Err(bad(
            line,
            format!("`{space}` variable without a type: `{}`", decl.trim()),
        ));
    };
    let declarators: String = tokens[at..].concat();
    let declarators: Vec<&str> = declarators.split(',').collect();
    if init.is_some() && declarators.len() != 1 {
        return Err(bad(line, "an initializer after several declarators"));
    }
    for declarator in declarators {
        let (name, dims) = match declarator.find('[') {
            Some(pos) => (&declarator[..pos], Some(&declarator[pos..])),
            None => (declarator, None),
        };
        if !is_identifier(name) {
            return Err(bad(line, format!("bad variable name `{name}`")));
        }
        let elem_bytes = elem_size * lanes;
        let values = match init {
            Some(init) => Some(initializer(init, elem_size, is_float, name, line)?),
            None => None,
        };
        let count = match dims {
            None => Some(1u64),
            Some(dims) => array_len(dims, name, line)?,
        };
        let count = match (count, &values) {
            (Some(count), _) => count,
            (None, Some(InitValues::Known(bytes))) => bytes.len() as u64 / elem_bytes,
            (None, Some(InitValues::Unknown(items))) => *items as u64 / lanes.max(1),
            (None, None) => {
                return Err(bad(
                    line,
                    format!("array `{name}[]` without a length or initializer"),
                ))
            }
        };
        let size = count
            .checked_mul(elem_bytes)
            .ok_or_else(|| bad(line, format!("size of `{name}` overflows")))?;
        let init = match values {
            None => GlobalInit::Zeroed,
            Some(InitValues::Unknown(_)) => GlobalInit::Unknown,
            Some(InitValues::Known(bytes)) => {
                if bytes.len() as u64 > size {
                    return Err(bad(
                        line,
                        format!(
                            "initializer of `{name}` holds {} bytes but the variable {size}",
                            bytes.len()
                        ),
                    ));
                }
                GlobalInit::Bytes(bytes)
            }
        };
        module.globals.push(Global {
            name: name.to_owned(),
            size,
            address: None,
            section: Some(space.to_owned()),
            init,
        });
    }
    Ok(())
}

/// `[4][2]` -> Some(8), `[]` -> None (length from the initializer).
fn array_len(dims: &str, name: &str, line: usize) -> Result<Option<u64>, ImageError> {
    let malformed = || bad(line, format!("bad array length in `{name}{dims}`"));
    let mut total = 1u64;
    let mut open = false;
    let mut rest = dims;
    let mut index = 0;
    while !rest.is_empty() {
        let (len, tail) = rest
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .ok_or_else(malformed)?;
        if len.is_empty() {
            // Only the outermost dimension may be left for the initializer to fix.
            if index != 0 {
                return Err(malformed());
            }
            open = true;
        } else {
            let len: u64 = len.parse().map_err(|_| malformed())?;
            total = total
                .checked_mul(len)
                .ok_or_else(|| bad(line, format!("size of `{name}` overflows")))?;
        }
        rest = tail;
        index += 1;
    }
    Ok((!open).then_some(total))
}

enum InitValues {
    /// Little-endian bytes of the listed values (zeros follow up to the variable's size).
    Known(Vec<u8>),
    /// Something we do not evaluate (a symbol address, an expression); the item count.
    Unknown(usize),
}

fn initializer(
    init: &str,
    elem_size: u64,
    is_float: bool,
    name: &str,
    line: usize,
) -> Result<InitValues, ImageError> {
    if init.is_empty() {
        return Err(bad(line, format!("empty initializer for `{name}`")));
    }
    let flat: String = init.chars().filter(|c| *c != '{' && *c != '}').collect();
    let items: Vec<&str> = flat.split(',').map(str::trim).collect();
    // llc writes `= {}` for a zero-initialized array: no values, all zeros.
    if items.iter().all(|item| item.is_empty()) && init.starts_with('{') {
        return Ok(InitValues::Known(Vec::new()));
    }
    // A trailing or doubled comma leaves an empty item.
    if items.iter().any(|item| item.is_empty()) {
        return Err(bad(
            line,
            format!("empty value in the initializer of `{name}`"),
        ));
    }
    let mut bytes = Vec::with_capacity(items.len().saturating_mul(elem_size as usize).min(1 << 20));
    for item in &items {
        match literal(item, elem_size, is_float) {
            Literal::Bits(bits) => {
                bytes.extend_from_slice(&bits.to_le_bytes()[..elem_size as usize]);
            }
            Literal::OutOfRange => {
                return Err(bad(
                    line,
                    format!(
                        "value `{item}` does not fit the {elem_size}-byte elements of `{name}`"
                    ),
                ))
            }
            Literal::Symbolic => return Ok(InitValues::Unknown(items.len())),
        }
    }
    Ok(InitValues::Known(bytes))
}

enum Literal {
    Bits(u64),
    OutOfRange,
    /// Not a number: a symbol, `generic(..)`, an expression; known only after loading.
    Symbolic,
}

fn literal(item: &str, elem_size: u64, is_float: bool) -> Literal {
    let bits = elem_size * 8;
    // PTX hex float literals carry the exact bits: 0fXXXXXXXX (f32), 0dXXXXXXXXXXXXXXXX (f64).
    for (prefix, width) in [("0f", 4u64), ("0F", 4), ("0d", 8), ("0D", 8)] {
        if let Some(hex) = item.strip_prefix(prefix) {
            if hex.len() as u64 == width * 2 {
                return match u64::from_str_radix(hex, 16) {
                    Ok(v) if width == elem_size => Literal::Bits(v),
                    Ok(_) => Literal::OutOfRange,
                    Err(_) => Literal::Symbolic,
                };
            }
        }
    }
    let (negative, magnitude) = match item.strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, item),
    };
    let magnitude = magnitude.strip_suffix(['U', 'u']).unwrap_or(magnitude);
    let parsed = if let Some(hex) = magnitude
        .strip_prefix("0x")
        .or_else(|| magnitude.strip_prefix("0X"))
    {
        u64::from_str_radix(hex, 16).ok()
    } else if let Some(bin) = magnitude
        .strip_prefix("0b")
        .or_else(|| magnitude.strip_prefix("0B"))
    {
        u64::from_str_radix(bin, 2).ok()
    } else if magnitude.len() > 1
        && magnitude.starts_with('0')
        && magnitude.bytes().all(|b| b.is_ascii_digit())
    {
        u64::from_str_radix(&magnitude[1..], 8).ok()
    } else if magnitude.bytes().all(|b| b.is_ascii_digit()) && !magnitude.is_empty() {
        magnitude.parse::<u64>().ok()
    } else {
        None
    };
    let Some(value) = parsed else {
        if is_float {
            return match (elem_size, item.parse::<f64>()) {
                (4, Ok(v)) => Literal::Bits(u64::from((v as f32).to_bits())),
                (8, Ok(v)) => Literal::Bits(v.to_bits()),
                _ => Literal::Symbolic,
            };
        }
        return Literal::Symbolic;
    };
    if is_float {
        // An integer written for a float element is a value, not bits.
        return match elem_size {
            4 => Literal::Bits(u64::from(
                (value as f32 * if negative { -1.0 } else { 1.0 }).to_bits(),
            )),
            8 => Literal::Bits((value as f64 * if negative { -1.0 } else { 1.0 }).to_bits()),
            _ => Literal::Symbolic,
        };
    }
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    if negative {
        let limit = 1u64 << (bits - 1);
        if value > limit {
            return Literal::OutOfRange;
        }
        Literal::Bits(value.wrapping_neg() & max)
    } else if value > max {
        Literal::OutOfRange
    } else {
        Literal::Bits(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globals(src: &str) -> Vec<Global> {
        parse(&format!(".version 7.0\n.target sm_70\n{src}"))
            .unwrap()
            .globals
    }

    fn err(src: &str) -> String {
        parse(src).unwrap_err().to_string()
    }

    #[test]
    fn directives_and_entries() {
        let module = parse(
            "// c\n.version 8.4 /* x */\n.target sm_90a, debug\n.address_size 64\n\
             .visible .entry k1(\n .param .u64 p\n)\n.maxntid 64, 1, 1\n{\n ret;\n}\n\
             .weak .entry k2() { { nested } }\n.extern .entry other();\n.func f() { }\n",
        )
        .unwrap();
        assert_eq!(module.version, Some((8, 4)));
        assert_eq!(module.target.as_deref(), Some("sm_90a"));
        assert_eq!(module.address_size, Some(64));
        assert_eq!(module.kernels, ["k1", "k2"]);
        assert_eq!(module.max_threads, [("k1".to_owned(), 64)]);
        let bytes: Vec<(&str, u64)> = module
            .params
            .iter()
            .map(|(name, declared)| (name.as_str(), declared.bytes))
            .collect();
        assert_eq!(bytes, [("k1", 8), ("k2", 0)]);
    }

    fn entry_param_bytes(header: &str) -> Option<u64> {
        entry_params(header).map(|declared| declared.bytes)
    }

    #[test]
    fn parameters_are_read_with_their_kinds_and_sizes() {
        // What the nightly's nvptx backend writes for `saxpy(a: f32, x: *const f32, y: *mut f32,
        // n: usize)`, and a few others.
        let kinds = |header: &str| -> Vec<(ParamKind, u32)> {
            entry_params(header)
                .unwrap()
                .params
                .iter()
                .map(|param| (param.kind, param.size))
                .collect()
        };
        let saxpy = "saxpy(\n\t.param .f32 saxpy_param_0,\n\t.param .u64 .ptr .align 1 \
                     saxpy_param_1,\n\t.param .u64 .ptr .align 1 saxpy_param_2,\n\t.param .u64 \
                     saxpy_param_3\n)  // @saxpy\n";
        assert_eq!(
            kinds(saxpy),
            [
                (ParamKind::Float, 4),
                (ParamKind::Pointer, 0),
                (ParamKind::Pointer, 0),
                (ParamKind::Integer, 8)
            ]
        );
        assert_eq!(kinds("__gpurun_test_x()\n"), []);
        let odd =
            "odd(.param .align 4 .b8 odd_param_0[12], .param .s32 odd_param_1, .param .f16 h, \
                   .param .f64 d, .param .b16 b)";
        assert_eq!(
            kinds(odd),
            [
                (ParamKind::Other, 12),
                (ParamKind::Integer, 4),
                (ParamKind::Other, 2),
                (ParamKind::Float, 8),
                (ParamKind::Integer, 2)
            ]
        );
        assert!(entry_params(saxpy)
            .unwrap()
            .params
            .iter()
            .all(|param| param.name.is_empty() && param.len.is_empty()));
    }

    #[test]
    fn parameter_bytes_end_at_the_last_parameter() {
        // (ptr, u64, u32): 20, not the 24 of the padded struct.
        let fill = "fill(\n.param .u64 a,\n.param .u64 b,\n.param .u32 c\n)\n";
        assert_eq!(entry_param_bytes(fill), Some(20));
        assert_eq!(
            entry_param_bytes("_end(.param .b32 _end_param_0)\n"),
            Some(4)
        );
        assert_eq!(entry_param_bytes("_end()\n"), Some(0));
        assert_eq!(entry_param_bytes("k\n"), Some(0));
        // Each parameter at its alignment: u32 at 0, u64 at 8, u16 at 16.
        let mixed = "m(.param .u32 a, .param .u64 b, .param .u16 c)";
        assert_eq!(entry_param_bytes(mixed), Some(18));
        let aggregate = "a(.param .u16 a, .param .align 8 .b8 b[12])";
        assert_eq!(entry_param_bytes(aggregate), Some(20));
        // A pointer parameter's `.align` is its pointee's.
        let begin =
            "_begin(.param .u32 a, .param .u64 .ptr .align 1 b, .param .u64 .ptr .align 1 c)";
        assert_eq!(entry_param_bytes(begin), Some(24));
        assert_eq!(entry_param_bytes("bad(.param .v4 x)"), None);
        assert_eq!(entry_param_bytes("bad(.param .u32 x[)"), None);
    }

    #[test]
    fn block_bounds_multiply_their_dimensions() {
        assert_eq!(
            block_bound("k(\n.param .u64 p\n)\n.maxntid 16, 8, 2\n"),
            Some(256)
        );
        assert_eq!(block_bound("k()\n.maxntid 1024\n"), Some(1024));
        assert_eq!(block_bound("k()\n.reqntid 32, 2\n"), Some(64));
        assert_eq!(block_bound("k()\n.maxnreg 64\n"), None);
        assert_eq!(block_bound("k()\n.maxntid x\n"), None);
        assert_eq!(block_bound("k()\n.maxntid 65536, 65536, 2\n"), None);
    }

    #[test]
    fn variables_sizes_and_initializers() {
        let g = globals(
            ".visible .global .align 8 .b8 buf[16] = {1, 2,\n 3};\n\
             .global .u32 counter = 0x10;\n.const .s16 neg = -2;\n\
             .global .u64 addr = generic(buf);\n.global .b8 open[] = {9, 8};\n\
             .global .v2 .u32 pair[3];\n.global .f32 one = 0f3F800000;\n\
             .global .u32 grid[2][3] = {{1,2,3},{4,5,6}};\n.shared .b8 ignored[4];\n\
             .visible .global .align 8 .b8 client[16] = {};\n",
        );
        let by = |n: &str| g.iter().find(|x| x.name == n).unwrap().clone();
        assert_eq!(by("buf").size, 16);
        assert_eq!(by("buf").init, GlobalInit::Bytes(vec![1, 2, 3]));
        assert_eq!(by("counter").init, GlobalInit::Bytes(vec![0x10, 0, 0, 0]));
        assert_eq!(by("neg").init, GlobalInit::Bytes(vec![0xfe, 0xff]));
        assert_eq!(by("neg").section.as_deref(), Some(".const"));
        assert_eq!(by("addr").init, GlobalInit::Unknown);
        assert_eq!(by("open").size, 2);
        assert_eq!(by("pair").size, 24);
        assert_eq!(by("pair").init, GlobalInit::Zeroed);
        assert_eq!(
            by("one").init,
            GlobalInit::Bytes(1.0f32.to_le_bytes().to_vec())
        );
        assert_eq!(by("grid").size, 24);
        assert_eq!(by("grid").read_u32_at(20), Some(6));
        assert!(g.iter().all(|x| x.name != "ignored"));
        assert_eq!(by("client").init, GlobalInit::Bytes(Vec::new()));
        assert_eq!(by("client").read_at(8, 8), Some(vec![0; 8]));
    }

    #[test]
    fn errors_name_the_line() {
        assert!(
            err(".version 7.0\n.target sm_70\n.global .b8 x[2] = {1, 2, 3};").contains("line 3")
        );
        assert!(err(".version 7.0\n.target sm_70\n.global .u8 x = 256;").contains("does not fit"));
        assert!(err(".version 7.0\n.target sm_70\n\n.global .b8 x[q];").contains("line 4"));
        assert!(err(".version 7.0\n.target sm_70\n.entry k() {\n").contains("unterminated `{`"));
        assert!(err(".version 7.0\n.target sm_70\n/* open").contains("unterminated `/*`"));
        assert!(err(".version 7.0\n.target sm_70\n}").contains("unexpected `}`"));
        assert!(err(".version x\n.target sm_70\n").contains("bad `.version`"));
        assert!(err(".version 7.0\n").contains("no `.target`"));
        assert!(err(".version 7.0\n.target sm_70\n.global x;").contains("without a type"));
        assert!(err(".version 7.0\n.target sm_70\n.global .b8 x[] ;").contains("without a length"));
        assert!(
            err(".version 7.0\n.target sm_70\n.global .b8 x[2] = {1,,2};").contains("empty value")
        );
        assert!(
            err(".version 7.0\n.target sm_70\n.global .b8 x[2] = {1, 2}").contains("unterminated")
                || err(".version 7.0\n.target sm_70\n.global .b8 x[2] = {1, 2}")
                    .contains("does not end")
        );
    }

    #[test]
    fn debug_info_sections_and_file_directives() {
        // The shape llc gives PTX built with `-g`: `.file` lines with quoted paths (no `;`),
        // `.loc` in bodies, and DWARF in `.section` blocks.
        let module = parse(
            ".version 7.0\n.target sm_70, debug\n.address_size 64\n\
             .file 1 \"/src/{weird};dir/lib.rs\", 1700000000, 1234\n\
             .visible .entry k()\n{\n.loc 1 5 0\nret;\n}\n\
             .section .debug_abbrev\n{\n.b8 1 // code\n.b8 17\n}\n\
             .section .debug_str\n{\n$L__info_string0:\n.b8 104,0\n}\n",
        )
        .unwrap();
        assert_eq!(module.kernels, ["k"]);
        assert_eq!(module.target.as_deref(), Some("sm_70"));
        assert!(module.globals.is_empty());
    }

    #[test]
    fn detection() {
        assert!(looks_like_ptx(b"// gen\n/* c */\n  .version 7.0"));
        assert!(!looks_like_ptx(b".target sm_70\n.version 7.0"));
        assert!(!looks_like_ptx(b"\xff\xfe"));
    }
}
