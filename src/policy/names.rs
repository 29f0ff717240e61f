//! The policy names and the spec's vocabulary, as parsing accepts them and errors list them,
//! and the nearest name to a typo.

/// Every policy name the crate documents ([`Policy::NAMES`](super::Policy::NAMES)): Keras'
/// dtype policy names, then its FP8 ones.
pub(crate) const NAMES: [&str; 7] = [
    "float32",
    "float16",
    "bfloat16",
    "mixed_float16",
    "mixed_bfloat16",
    "float8_from_mixed_bfloat16",
    "float8_from_mixed_float16",
];

/// The Keras dtype policy names [`Policy`](super::Policy) parses.
pub(crate) const VALID_NAMES: &[&str] = NAMES.split_at(5).0;

/// The FP8 policies, shown in errors (any name of [`VALID_NAMES`] after `float8_from_`
/// parses too).
pub(crate) const FP8_NAMES: &[&str] = NAMES.split_at(5).1;

/// The prefix of Keras' FP8 policy names.
pub(crate) const FP8_PREFIX: &str = "float8_from_";

/// An example of the jmp-style spec, shown in errors.
pub(crate) const SPEC_EXAMPLE: &str = "params=float32,compute=bfloat16,output=float32";

/// What a spec may hold, shown in every spec error: its keys, the dtype spellings, the FP8
/// scalings.
pub(crate) const SPEC_HELP: &str = "a spec is key=value pairs joined by commas, such as \
    \"params=float32,compute=bfloat16,output=float32\"; keys: params (or param, p), \
    compute (or c), output (or o), fp8, history, margin, amax, drift, format, grads, kernels; \
    dtypes: float32 (or f32, full), float16 (or f16, half), bfloat16 (or bf16); fp8: tensor \
    (or per_tensor), blockwise (or block, blocks), delayed (with history=N, margin=N, \
    amax=max|most_recent), bias (with drift=N), none; format: hybrid, auto; grads: aps, \
    aps_shp, none; kernels: auto, backend; a missing dtype key means float32";

/// The policy name nearest to `name` by edit distance (ignoring case, `-` read as `_`), if
/// it is near enough to be a typo: at most one edit per four characters, and at least one.
pub(crate) fn nearest_name(name: &str) -> Option<&'static str> {
    let wanted: Vec<char> = name.to_lowercase().replace('-', "_").chars().collect();
    let limit = (wanted.len() / 4).max(1);
    VALID_NAMES
        .iter()
        .chain(FP8_NAMES.iter())
        .map(|&candidate| (edit_distance(&wanted, candidate), candidate))
        .filter(|&(distance, _)| distance <= limit)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance between `a` and `b`.
fn edit_distance(a: &[char], b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::nearest_name;

    #[test]
    fn typos_get_the_nearest_name_and_strangers_none() {
        assert_eq!(nearest_name("mixed_float61"), Some("mixed_float16"));
        assert_eq!(nearest_name("Mixed-Float16"), Some("mixed_float16"));
        assert_eq!(nearest_name("Float32"), Some("float32"));
        assert_eq!(nearest_name("mixed_bfloat"), Some("mixed_bfloat16"));
        assert_eq!(nearest_name("bfloat61"), Some("bfloat16"));
        assert_eq!(
            nearest_name("float8_from_mixed_bfloat"),
            Some("float8_from_mixed_bfloat16")
        );
        assert_eq!(nearest_name("int8"), None);
        assert_eq!(nearest_name("mixed"), None);
    }
}
