//! Errors of the rate-limit math. Each carries the kind of failure (which the
//! SQL layer maps to a SQLSTATE), the name of the offending parameter and a
//! message meant for the caller.

use std::fmt;

/// The class of an error; the SQL layer maps each class to one SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A required value is NULL (SQLSTATE `22004` null_value_not_allowed).
    NullValue,
    /// A value outside its allowed domain (SQLSTATE `22023` invalid_parameter_value).
    InvalidParameter,
    /// A computed value does not fit its type (SQLSTATE `22003` numeric_value_out_of_range).
    OutOfRange,
    /// A computed time is outside PostgreSQL's timestamp range (SQLSTATE `22008` datetime_field_overflow).
    TimestampOutOfRange,
}

/// An error that names the parameter it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitError {
    /// What went wrong, as a class.
    pub kind: ErrorKind,
    /// The SQL parameter (or result) the error is about, e.g. `"rate"`.
    pub parameter: &'static str,
    /// A complete sentence for the caller, naming the parameter.
    pub message: String,
    /// What the caller can do about it (PostgreSQL's HINT), when one
    /// remedy works wherever the error can come from.
    pub hint: Option<&'static str>,
}

impl LimitError {
    /// A required parameter is NULL.
    pub fn null(parameter: &'static str) -> Self {
        LimitError {
            kind: ErrorKind::NullValue,
            parameter,
            message: format!("{parameter} must not be NULL"),
            hint: None,
        }
    }

    /// A parameter has a value outside its domain.
    pub fn invalid(parameter: &'static str, message: String) -> Self {
        LimitError {
            kind: ErrorKind::InvalidParameter,
            parameter,
            message,
            hint: None,
        }
    }

    /// A computed value does not fit.
    pub fn out_of_range(parameter: &'static str, message: String) -> Self {
        LimitError {
            kind: ErrorKind::OutOfRange,
            parameter,
            message,
            hint: None,
        }
    }

    /// The same error with `hint`.
    #[must_use]
    pub fn with_hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }
}

/// Formats a float the way PostgreSQL prints a `float8` (`NaN`,
/// `Infinity`, `-Infinity`, else the shortest exact decimal), for messages.
pub fn show(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        value.to_string()
    }
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LimitError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_show_as_postgresql_prints_them() {
        assert_eq!(show(f64::NAN), "NaN");
        assert_eq!(show(f64::INFINITY), "Infinity");
        assert_eq!(show(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(show(1.5), "1.5");
        assert_eq!(show(-0.25), "-0.25");
    }

    #[test]
    fn an_error_displays_its_message() {
        let error = LimitError::invalid("rate", "rate must be finite".to_string());
        assert_eq!(error.to_string(), "rate must be finite");
    }
}
