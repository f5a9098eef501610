//! Whether host images are built with the host emulation's memory checks: the setting's
//! environment variable and its words, for the CLI's `--emulation-checks` and `gpurun-test`.

/// Environment variable that turns the host emulation's memory checks off (`off`) or on (`on`,
/// the default), as `--emulation-checks` does; `gpurun-test` reads it too.
pub const EMULATION_CHECKS_ENV: &str = "GPURUN_EMULATION_CHECKS";

/// `on` or `off` (also `true`/`false`, `1`/`0`, `yes`/`no`): a value of
/// `--emulation-checks` or [`EMULATION_CHECKS_ENV`].
pub fn parse_emulation_checks(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!(
            "the host emulation's memory checks are `on` or `off`, not `{text}`"
        )),
    }
}

/// Whether [`EMULATION_CHECKS_ENV`] leaves the memory checks on (unset: on).
pub fn emulation_checks_by_env() -> Result<bool, String> {
    match std::env::var(EMULATION_CHECKS_ENV) {
        Ok(value) => parse_emulation_checks(&value)
            .map_err(|error| format!("{EMULATION_CHECKS_ENV}: {error}")),
        Err(_) => Ok(true),
    }
}
