//! Shared helpers for the integration tests: connecting to the test server.
