//! The table from [`ApiKey`] to the request and response types of
//! kafka-protocol, so that any body can be decoded through the guard.
//!
//! The crate's own `RequestKind::decode` and `ResponseKind::decode` only
//! take a `&mut Bytes`, which would bypass [`GuardBuf`]. The enum variants are
//! named after the api keys, so one list of names gives the decoders (generic
//! over the buffer, so that [`GuardBuf`](super::guard::GuardBuf) can be fed in) and the
//! reverse mapping (body to api key) used to check what is encoded, and the
//! versions each message type can decode, which for a few apis are fewer than
//! `ApiKey::valid_versions` claims (OffsetCommit and OffsetFetch v10 and
//! InitProducerId v6 requests, in 0.18.0).

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::{Decodable, Message, VersionRange};

use super::guard::BoxError;

/// The versions of the message type inside a `RequestKind` variant (the
/// variant's constructor names the type).
fn request_type_versions<T: Message>(_variant: fn(T) -> RequestKind) -> VersionRange {
    T::VERSIONS
}

/// The versions of the message type inside a `ResponseKind` variant.
fn response_type_versions<T: Message>(_variant: fn(T) -> ResponseKind) -> VersionRange {
    T::VERSIONS
}

macro_rules! api_table {
    ($($api:ident),* $(,)?) => {
        /// The versions the request type of `api_key` can decode and encode.
        pub(crate) fn request_type_range(api_key: ApiKey) -> VersionRange {
            match api_key {
                $(ApiKey::$api => request_type_versions(RequestKind::$api),)*
            }
        }

        /// The versions the response type of `api_key` can decode and encode.
        pub(crate) fn response_type_range(api_key: ApiKey) -> VersionRange {
            match api_key {
                $(ApiKey::$api => response_type_versions(ResponseKind::$api),)*
            }
        }

        /// Decodes the body of an `api_key` request at `version`.
        pub(crate) fn decode_request_body<B: ByteBuf>(
            api_key: ApiKey,
            buf: &mut B,
            version: i16,
        ) -> Result<RequestKind, BoxError> {
            match api_key {
                $(ApiKey::$api => Decodable::decode(buf, version)
                    .map(RequestKind::$api)
                    .map_err(BoxError::from),)*
            }
        }

        /// Decodes the body of an `api_key` response at `version`.
        pub(crate) fn decode_response_body<B: ByteBuf>(
            api_key: ApiKey,
            buf: &mut B,
            version: i16,
        ) -> Result<ResponseKind, BoxError> {
            match api_key {
                $(ApiKey::$api => Decodable::decode(buf, version)
                    .map(ResponseKind::$api)
                    .map_err(BoxError::from),)*
            }
        }

        /// The api key of a request body (`None` for kinds this table does
        /// not know, should the crate add some).
        pub(crate) fn request_api_key(body: &RequestKind) -> Option<ApiKey> {
            match body {
                $(RequestKind::$api(_) => Some(ApiKey::$api),)*
                _ => None,
            }
        }

        /// The api key of a response body.
        pub(crate) fn response_api_key(body: &ResponseKind) -> Option<ApiKey> {
            match body {
                $(ResponseKind::$api(_) => Some(ApiKey::$api),)*
                _ => None,
            }
        }
    };
}

api_table!(
    Produce,
    Fetch,
    ListOffsets,
    Metadata,
    OffsetCommit,
    OffsetFetch,
    FindCoordinator,
    JoinGroup,
    Heartbeat,
    LeaveGroup,
    SyncGroup,
    DescribeGroups,
    ListGroups,
    SaslHandshake,
    ApiVersions,
    CreateTopics,
    DeleteTopics,
    DeleteRecords,
    InitProducerId,
    OffsetForLeaderEpoch,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
    WriteTxnMarkers,
    TxnOffsetCommit,
    DescribeAcls,
    CreateAcls,
    DeleteAcls,
    DescribeConfigs,
    AlterConfigs,
    AlterReplicaLogDirs,
    DescribeLogDirs,
    SaslAuthenticate,
    CreatePartitions,
    CreateDelegationToken,
    RenewDelegationToken,
    ExpireDelegationToken,
    DescribeDelegationToken,
    DeleteGroups,
    ElectLeaders,
    IncrementalAlterConfigs,
    AlterPartitionReassignments,
    ListPartitionReassignments,
    OffsetDelete,
    DescribeClientQuotas,
    AlterClientQuotas,
    DescribeUserScramCredentials,
    AlterUserScramCredentials,
    Vote,
    BeginQuorumEpoch,
    EndQuorumEpoch,
    DescribeQuorum,
    AlterPartition,
    UpdateFeatures,
    Envelope,
    FetchSnapshot,
    DescribeCluster,
    DescribeProducers,
    BrokerRegistration,
    BrokerHeartbeat,
    UnregisterBroker,
    DescribeTransactions,
    ListTransactions,
    AllocateProducerIds,
    ConsumerGroupHeartbeat,
    ConsumerGroupDescribe,
    ControllerRegistration,
    GetTelemetrySubscriptions,
    PushTelemetry,
    AssignReplicasToDirs,
    ListConfigResources,
    DescribeTopicPartitions,
    ShareGroupHeartbeat,
    ShareGroupDescribe,
    ShareFetch,
    ShareAcknowledge,
    AddRaftVoter,
    RemoveRaftVoter,
    UpdateRaftVoter,
    InitializeShareGroupState,
    ReadShareGroupState,
    WriteShareGroupState,
    DeleteShareGroupState,
    ReadShareGroupStateSummary,
    DescribeShareGroupOffsets,
    AlterShareGroupOffsets,
    DeleteShareGroupOffsets,
);

#[cfg(test)]
mod tests {
    //! Checks the guard's one assumption about the schemas (see the guard's
    //! module docs): no `Int32`-counted array has elements that decode from
    //! zero bytes.

    use bytes::{Buf, Bytes, TryGetError};

    use super::*;

    static ZEROS: [u8; 16] = [0; 16];

    /// An endless buffer of small values: every array has one element,
    /// every string and byte field is short, every option is present, and
    /// the `Int32` read number `bump` (if any) is 2 instead of 1.
    struct Probe {
        consumed: usize,
        i32_reads: usize,
        bump: Option<usize>,
    }

    impl Buf for Probe {
        fn remaining(&self) -> usize {
            1 << 30
        }
        fn chunk(&self) -> &[u8] {
            &ZEROS
        }
        fn advance(&mut self, cnt: usize) {
            self.consumed += cnt;
        }
        fn try_get_u8(&mut self) -> Result<u8, TryGetError> {
            self.consumed += 1;
            Ok(1)
        }
        fn try_get_i8(&mut self) -> Result<i8, TryGetError> {
            self.consumed += 1;
            Ok(1)
        }
        fn try_get_i16(&mut self) -> Result<i16, TryGetError> {
            self.consumed += 2;
            Ok(0)
        }
        fn try_get_i32(&mut self) -> Result<i32, TryGetError> {
            self.consumed += 4;
            let value = if self.bump == Some(self.i32_reads) {
                2
            } else {
                1
            };
            self.i32_reads += 1;
            Ok(value)
        }
    }

    impl ByteBuf for Probe {
        fn peek_bytes(&mut self, _r: std::ops::Range<usize>) -> Bytes {
            Bytes::new()
        }
        fn get_bytes(&mut self, size: usize) -> Bytes {
            self.consumed += size;
            Bytes::from(vec![0; size])
        }
    }

    /// Bytes consumed, `Int32` reads and the Debug text's length of one
    /// probe decode, or `None` if it failed.
    fn probe<T: std::fmt::Debug>(
        decode: impl Fn(&mut Probe) -> Result<T, BoxError>,
        bump: Option<usize>,
    ) -> Option<(usize, usize, usize)> {
        let mut p = Probe {
            consumed: 0,
            i32_reads: 0,
            bump,
        };
        let value = decode(&mut p).ok()?;
        Some((p.consumed, p.i32_reads, format!("{value:?}").len()))
    }

    /// Turning one `Int32` from 1 into 2 changes nothing in the Debug
    /// text's length if it is a scalar, and changes the bytes consumed if
    /// it counts bytes or elements of at least one byte. A count of
    /// zero-byte elements is the one case with more text and the same bytes.
    fn zero_byte_element_counts<T: std::fmt::Debug>(
        decode: impl Fn(&mut Probe) -> Result<T, BoxError>,
    ) -> Result<Vec<usize>, &'static str> {
        let (consumed, reads, text) = probe(&decode, None).ok_or("probe decode failed")?;
        let mut found = Vec::new();
        for i in 0..reads {
            let (c, _, t) = probe(&decode, Some(i)).ok_or("bumped probe decode failed")?;
            if c == consumed && t != text {
                found.push(i);
            }
        }
        Ok(found)
    }

    #[test]
    fn no_int32_counted_array_has_zero_byte_elements() {
        let mut checked = 0;
        for api_key in ApiKey::iter() {
            let range = api_key.valid_versions();
            for version in range.min..=range.max {
                // Flexible versions count arrays with varints, which the
                // guard bounds by the bytes left whatever the element size.
                if api_key.request_header_version(version) < 2
                    && request_type_range(api_key).max >= version
                {
                    let found =
                        zero_byte_element_counts(|b| decode_request_body(api_key, b, version));
                    assert_eq!(found, Ok(vec![]), "{api_key:?} v{version} request");
                    checked += 1;
                }
                let flexible_response = if api_key == ApiKey::ApiVersions {
                    version >= 3
                } else {
                    api_key.response_header_version(version) >= 1
                };
                if !flexible_response && response_type_range(api_key).max >= version {
                    let found =
                        zero_byte_element_counts(|b| decode_response_body(api_key, b, version));
                    assert_eq!(found, Ok(vec![]), "{api_key:?} v{version} response");
                    checked += 1;
                }
            }
        }
        assert!(checked > 200, "only {checked} message versions checked");
    }

    #[test]
    fn the_probe_would_see_a_zero_byte_element() {
        // A stand-in decoder: an Int32 count of elements that read nothing.
        let found = zero_byte_element_counts(|b| {
            let n = b.try_get_i32()?;
            let scalar = b.try_get_i32()?;
            Ok((vec![(); usize::try_from(n)?], scalar))
        });
        assert_eq!(found, Ok(vec![0]));
    }
}
