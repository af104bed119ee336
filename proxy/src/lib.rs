//! floe-proxy: the Kafka wire protocol in front of Floe's brokers.
//!
//! - [`codec`]: frames and guarded request decoding, response encoding.
//! - [`admin`]: topic and config administration answered from the metadata service.

pub mod admin;
pub mod codec;
