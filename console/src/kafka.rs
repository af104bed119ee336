//! The Kafka requests the console asks, answered by this process's proxy
//! for the asker ([`floe_proxy::server::serve_as`]): each returns the
//! answer, already narrowed by the asker's ACLs.

use floe_proxy::groups::ClientInfo;
use floe_proxy::handlers::Context;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::error::{ApiError, ApiResult, Kind};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// One request, answered as `T` (the matching response kind).
async fn ask<T>(
    ctx: &Context,
    who: &ClientInfo,
    what: &str,
    version: i16,
    req: RequestKind,
    take: impl FnOnce(ResponseKind) -> Option<T>,
) -> ApiResult<T> {
    floe_proxy::server::serve_as(ctx, who, version, req)
        .await
        .and_then(take)
        .ok_or_else(|| ApiError::new(Kind::Denied, format!("{what} refused to this principal")))
}

/// Every topic the asker may describe (Metadata v12, no auto-creation).
pub async fn metadata(
    ctx: &Context,
    who: &ClientInfo,
    topics: Option<&[String]>,
) -> ApiResult<MetadataResponse> {
    let mut r = MetadataRequest::default();
    r.topics = topics.map(|names| {
        names
            .iter()
            .map(|n| {
                let mut t = MetadataRequestTopic::default();
                t.name = Some(TopicName(s(n)));
                t
            })
            .collect()
    });
    r.allow_auto_topic_creation = false;
    ask(
        ctx,
        who,
        "Metadata",
        12,
        RequestKind::Metadata(r),
        |k| match k {
            ResponseKind::Metadata(m) => Some(m),
            _ => None,
        },
    )
    .await
}

/// Which offset ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spec {
    Earliest,
    Latest,
    /// The last stable offset (latest under read_committed).
    Stable,
    /// The first offset whose timestamp is at or after this (ms).
    Time(i64),
}

/// One offset per (topic, partition) asked, in the order asked; `None`
/// where the partition answered an error.
pub async fn list_offsets(
    ctx: &Context,
    who: &ClientInfo,
    partitions: &[(String, i32)],
    spec: Spec,
) -> ApiResult<Vec<Option<i64>>> {
    let (timestamp, isolation) = match spec {
        Spec::Earliest => (-2, 0),
        Spec::Latest => (-1, 0),
        Spec::Stable => (-1, 1),
        Spec::Time(t) => (t, 1),
    };
    let mut r = ListOffsetsRequest::default();
    r.replica_id = BrokerId(-1);
    r.isolation_level = isolation;
    for (topic, p) in partitions {
        let mut part = ListOffsetsPartition::default();
        part.partition_index = *p;
        part.current_leader_epoch = -1;
        part.timestamp = timestamp;
        match r.topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic => t.partitions.push(part),
            _ => {
                let mut t = ListOffsetsTopic::default();
                t.name = TopicName(s(topic));
                t.partitions.push(part);
                r.topics.push(t);
            }
        }
    }
    let resp = ask(
        ctx,
        who,
        "ListOffsets",
        7,
        RequestKind::ListOffsets(r),
        |k| match k {
            ResponseKind::ListOffsets(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    let mut found = std::collections::HashMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            // A time after the last record answers -1: no such offset.
            let ok = p.error_code == 0 && p.offset >= 0;
            found.insert(
                (t.name.0.to_string(), p.partition_index),
                ok.then_some(p.offset),
            );
        }
    }
    Ok(partitions
        .iter()
        .map(|k| found.get(k).copied().flatten())
        .collect())
}

/// A resource's config entries, or the error code DescribeConfigs
/// answered for it.
pub type Configs = Result<Vec<describe_configs_response::DescribeConfigsResourceResult>, i16>;

/// Topic configs (DescribeConfigs v4): by topic, its entries, or the
/// error code it answered.
pub async fn topic_configs(
    ctx: &Context,
    who: &ClientInfo,
    topics: &[String],
) -> ApiResult<Vec<(String, Configs)>> {
    configs(ctx, who, floe_client::RESOURCE_TOPIC, topics).await
}

/// A group's configs (DescribeConfigs v4 of a GROUP resource).
pub async fn group_configs(ctx: &Context, who: &ClientInfo, group: &str) -> ApiResult<Configs> {
    let mut all = configs(ctx, who, floe_client::RESOURCE_GROUP, &[group.to_owned()]).await?;
    all.pop()
        .map(|(_, c)| c)
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "DescribeConfigs answered no group"))
}

/// Configs of resources of one type (DescribeConfigs v4).
async fn configs(
    ctx: &Context,
    who: &ClientInfo,
    resource_type: i8,
    names: &[String],
) -> ApiResult<Vec<(String, Configs)>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = DescribeConfigsRequest::default();
    for t in names {
        let mut res = DescribeConfigsResource::default();
        res.resource_type = resource_type;
        res.resource_name = s(t);
        res.configuration_keys = None;
        r.resources.push(res);
    }
    let resp = ask(
        ctx,
        who,
        "DescribeConfigs",
        4,
        RequestKind::DescribeConfigs(r),
        |k| match k {
            ResponseKind::DescribeConfigs(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    Ok(resp
        .results
        .into_iter()
        .map(|res| {
            let out = if res.error_code == 0 {
                Ok(res.configs)
            } else {
                Err(res.error_code)
            };
            (res.resource_name.to_string(), out)
        })
        .collect())
}

/// Every group the asker may describe (ListGroups v5, every type).
pub async fn list_groups(ctx: &Context, who: &ClientInfo) -> ApiResult<ListGroupsResponse> {
    ask(
        ctx,
        who,
        "ListGroups",
        5,
        RequestKind::ListGroups(ListGroupsRequest::default()),
        |k| match k {
            ResponseKind::ListGroups(m) => Some(m),
            _ => None,
        },
    )
    .await
}

/// A classic group (DescribeGroups v5).
pub async fn describe_classic(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
) -> ApiResult<describe_groups_response::DescribedGroup> {
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![GroupId(s(id))];
    let resp = ask(
        ctx,
        who,
        "DescribeGroups",
        5,
        RequestKind::DescribeGroups(r),
        |k| match k {
            ResponseKind::DescribeGroups(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.groups
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "DescribeGroups answered no group"))
}

/// A KIP-848 consumer group (ConsumerGroupDescribe v0).
pub async fn describe_consumer(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
) -> ApiResult<consumer_group_describe_response::DescribedGroup> {
    let mut r = ConsumerGroupDescribeRequest::default();
    r.group_ids = vec![GroupId(s(id))];
    let resp = ask(
        ctx,
        who,
        "ConsumerGroupDescribe",
        0,
        RequestKind::ConsumerGroupDescribe(r),
        |k| match k {
            ResponseKind::ConsumerGroupDescribe(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.groups
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "ConsumerGroupDescribe answered no group"))
}

/// A share group (ShareGroupDescribe v1).
pub async fn describe_share(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
) -> ApiResult<share_group_describe_response::DescribedGroup> {
    let mut r = ShareGroupDescribeRequest::default();
    r.group_ids = vec![GroupId(s(id))];
    let resp = ask(
        ctx,
        who,
        "ShareGroupDescribe",
        1,
        RequestKind::ShareGroupDescribe(r),
        |k| match k {
            ResponseKind::ShareGroupDescribe(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.groups
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "ShareGroupDescribe answered no group"))
}

/// A group's committed offsets, every partition it has one for (OffsetFetch
/// v8): `(topic, partition, offset)`, or the group's error code.
pub async fn committed_offsets(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
) -> ApiResult<Result<Vec<(String, i32, i64)>, i16>> {
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = GroupId(s(id));
    g.topics = None;
    let mut r = OffsetFetchRequest::default();
    r.groups = vec![g];
    let resp = ask(
        ctx,
        who,
        "OffsetFetch",
        8,
        RequestKind::OffsetFetch(r),
        |k| match k {
            ResponseKind::OffsetFetch(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    let Some(g) = resp.groups.into_iter().next() else {
        return Err(ApiError::new(
            Kind::Unavailable,
            "OffsetFetch answered no group",
        ));
    };
    if g.error_code != 0 {
        return Ok(Err(g.error_code));
    }
    let mut out = Vec::new();
    for t in g.topics {
        for p in t.partitions {
            if p.error_code == 0 && p.committed_offset >= 0 {
                out.push((t.name.0.to_string(), p.partition_index, p.committed_offset));
            }
        }
    }
    out.sort();
    Ok(Ok(out))
}

/// A share group's start offset on every partition it has state on
/// (DescribeShareGroupOffsets v0): `(topic, partition, start)`.
pub async fn share_offsets(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
) -> ApiResult<Result<Vec<(String, i32, i64)>, i16>> {
    let mut g = DescribeShareGroupOffsetsRequestGroup::default();
    g.group_id = GroupId(s(id));
    g.topics = None;
    let mut r = DescribeShareGroupOffsetsRequest::default();
    r.groups = vec![g];
    let resp = ask(
        ctx,
        who,
        "DescribeShareGroupOffsets",
        0,
        RequestKind::DescribeShareGroupOffsets(r),
        |k| match k {
            ResponseKind::DescribeShareGroupOffsets(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    let Some(g) = resp.groups.into_iter().next() else {
        return Err(ApiError::new(
            Kind::Unavailable,
            "DescribeShareGroupOffsets answered no group",
        ));
    };
    if g.error_code != 0 {
        return Ok(Err(g.error_code));
    }
    let mut out = Vec::new();
    for t in g.topics {
        for p in t.partitions {
            if p.error_code == 0 && p.start_offset >= 0 {
                out.push((
                    t.topic_name.0.to_string(),
                    p.partition_index,
                    p.start_offset,
                ));
            }
        }
    }
    out.sort();
    Ok(Ok(out))
}

/// Records of one partition from `offset` (Fetch v11, read_committed, no
/// wait): the partition's answer and its record bytes.
pub async fn fetch(
    ctx: &Context,
    who: &ClientInfo,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
) -> ApiResult<(fetch_response::PartitionData, Vec<bytes::Bytes>)> {
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.current_leader_epoch = -1;
    p.fetch_offset = offset;
    p.log_start_offset = -1;
    p.partition_max_bytes = max_bytes;
    let mut t = FetchTopic::default();
    t.topic = TopicName(s(topic));
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.max_wait_ms = 0;
    r.min_bytes = 0;
    r.max_bytes = max_bytes;
    r.isolation_level = 1;
    r.session_id = 0;
    // -1: no fetch session (a full fetch, kept nowhere).
    r.session_epoch = -1;
    r.topics = vec![t];
    let answer = floe_proxy::server::fetch_as(ctx, who, 11, &r).await;
    let mut records = answer.records.into_iter();
    let data = answer
        .resp
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .next()
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "Fetch answered no partition"))?;
    Ok((data, records.next().unwrap_or_default()))
}

/// The outcome of an action on one resource: its error code and message.
pub type Outcome = (i16, Option<String>);

fn outcome(code: i16, message: &Option<StrBytes>) -> Outcome {
    (code, message.as_ref().map(|m| m.to_string()))
}

/// CreateTopics v5 of one topic (`partitions` -1: the cluster's default).
pub async fn create_topic(
    ctx: &Context,
    who: &ClientInfo,
    name: &str,
    partitions: i32,
    configs: &[(String, String)],
) -> ApiResult<Outcome> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    let mut t = CreatableTopic::default();
    t.name = TopicName(s(name));
    t.num_partitions = partitions;
    t.replication_factor = -1;
    t.configs = configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = s(k);
            c.value = Some(s(v));
            c
        })
        .collect();
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 30_000;
    let resp = ask(
        ctx,
        who,
        "CreateTopics",
        5,
        RequestKind::CreateTopics(r),
        |k| match k {
            ResponseKind::CreateTopics(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.topics
        .iter()
        .find(|t| t.name.0.as_str() == name)
        .map(|t| outcome(t.error_code, &t.error_message))
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "CreateTopics answered no topic"))
}

/// DeleteTopics v4 of one topic, by name.
pub async fn delete_topic(ctx: &Context, who: &ClientInfo, name: &str) -> ApiResult<Outcome> {
    let mut r = DeleteTopicsRequest::default();
    r.topic_names = vec![TopicName(s(name))];
    r.timeout_ms = 30_000;
    let resp = ask(
        ctx,
        who,
        "DeleteTopics",
        4,
        RequestKind::DeleteTopics(r),
        |k| match k {
            ResponseKind::DeleteTopics(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.responses
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
        .map(|t| outcome(t.error_code, &t.error_message))
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "DeleteTopics answered no topic"))
}

/// CreatePartitions v3: the topic grows to `count` partitions.
pub async fn add_partitions(
    ctx: &Context,
    who: &ClientInfo,
    name: &str,
    count: i32,
) -> ApiResult<Outcome> {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    let mut t = CreatePartitionsTopic::default();
    t.name = TopicName(s(name));
    t.count = count;
    t.assignments = None;
    let mut r = CreatePartitionsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 30_000;
    let resp = ask(
        ctx,
        who,
        "CreatePartitions",
        3,
        RequestKind::CreatePartitions(r),
        |k| match k {
            ResponseKind::CreatePartitions(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.results
        .iter()
        .find(|t| t.name.0.as_str() == name)
        .map(|t| outcome(t.error_code, &t.error_message))
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "CreatePartitions answered no topic"))
}

/// IncrementalAlterConfigs v1 of one topic: settings set, and settings
/// deleted (back to their defaults).
pub async fn alter_topic_configs(
    ctx: &Context,
    who: &ClientInfo,
    name: &str,
    set: &[(String, String)],
    delete: &[String],
) -> ApiResult<Outcome> {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let mut res = AlterConfigsResource::default();
    res.resource_type = 2;
    res.resource_name = s(name);
    for (k, v) in set {
        let mut c = AlterableConfig::default();
        c.name = s(k);
        c.config_operation = 0;
        c.value = Some(s(v));
        res.configs.push(c);
    }
    for k in delete {
        let mut c = AlterableConfig::default();
        c.name = s(k);
        c.config_operation = 1;
        c.value = None;
        res.configs.push(c);
    }
    let mut r = IncrementalAlterConfigsRequest::default();
    r.resources = vec![res];
    let resp = ask(
        ctx,
        who,
        "IncrementalAlterConfigs",
        1,
        RequestKind::IncrementalAlterConfigs(r),
        |k| match k {
            ResponseKind::IncrementalAlterConfigs(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.responses
        .iter()
        .find(|t| t.resource_name.as_str() == name)
        .map(|t| outcome(t.error_code, &t.error_message))
        .ok_or_else(|| {
            ApiError::new(
                Kind::Unavailable,
                "IncrementalAlterConfigs answered no topic",
            )
        })
}

/// DeleteGroups v2 of one group.
pub async fn delete_group(ctx: &Context, who: &ClientInfo, id: &str) -> ApiResult<Outcome> {
    let mut r = DeleteGroupsRequest::default();
    r.groups_names = vec![GroupId(s(id))];
    let resp = ask(
        ctx,
        who,
        "DeleteGroups",
        2,
        RequestKind::DeleteGroups(r),
        |k| match k {
            ResponseKind::DeleteGroups(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    resp.results
        .iter()
        .find(|g| g.group_id.0.as_str() == id)
        .map(|g| (g.error_code, None))
        .ok_or_else(|| ApiError::new(Kind::Unavailable, "DeleteGroups answered no group"))
}

/// OffsetCommit v8 as an admin (generation -1, no member id: the
/// coordinator takes it only while the group has no live member), as
/// `floe group reset-offsets --execute` commits: each partition's outcome.
pub async fn commit_as_admin(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
    offsets: &[(String, i32, i64)],
) -> ApiResult<Vec<(String, i32, i16)>> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(s(id));
    r.generation_id_or_member_epoch = -1;
    r.member_id = StrBytes::default();
    r.retention_time_ms = -1;
    for (topic, partition, offset) in offsets {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = *partition;
        p.committed_offset = *offset;
        p.committed_leader_epoch = -1;
        p.committed_metadata = Some(StrBytes::default());
        match r.topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic => t.partitions.push(p),
            _ => {
                let mut t = OffsetCommitRequestTopic::default();
                t.name = TopicName(s(topic));
                t.partitions.push(p);
                r.topics.push(t);
            }
        }
    }
    let resp = ask(
        ctx,
        who,
        "OffsetCommit",
        8,
        RequestKind::OffsetCommit(r),
        |k| match k {
            ResponseKind::OffsetCommit(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    Ok(resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect())
}

/// A share group's answer to AlterShareGroupOffsets: the group's outcome,
/// and each partition's `(topic, partition, code, message)`.
pub type ShareReset = (Outcome, Vec<(String, i32, i16, Option<String>)>);

/// AlterShareGroupOffsets v0 of `offsets` (`(topic, partition, start)`,
/// sorted by topic), one entry a topic.
fn alter_share_request(id: &str, offsets: &[(String, i32, i64)]) -> AlterShareGroupOffsetsRequest {
    use kafka_protocol::messages::alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
    };
    let mut r = AlterShareGroupOffsetsRequest::default();
    r.group_id = GroupId(s(id));
    for (topic, partition, start) in offsets {
        let mut p = AlterShareGroupOffsetsRequestPartition::default();
        p.partition_index = *partition;
        p.start_offset = *start;
        match r.topics.last_mut() {
            Some(t) if t.topic_name.0.as_str() == topic => t.partitions.push(p),
            _ => {
                let mut t = AlterShareGroupOffsetsRequestTopic::default();
                t.topic_name = TopicName(s(topic));
                t.partitions.push(p);
                r.topics.push(t);
            }
        }
    }
    r
}

/// Moves a share group's start offsets (AlterShareGroupOffsets v0), as
/// `floe group reset-offsets --execute` does for a share group: the proxy
/// refuses it while the group has members (NON_EMPTY_GROUP).
pub async fn alter_share_group_offsets(
    ctx: &Context,
    who: &ClientInfo,
    id: &str,
    offsets: &[(String, i32, i64)],
) -> ApiResult<ShareReset> {
    let resp = ask(
        ctx,
        who,
        "AlterShareGroupOffsets",
        0,
        RequestKind::AlterShareGroupOffsets(alter_share_request(id, offsets)),
        |k| match k {
            ResponseKind::AlterShareGroupOffsets(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    let partitions = resp
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.topic_name.0.to_string(),
                    p.partition_index,
                    p.error_code,
                    p.error_message.as_ref().map(|m| m.to_string()),
                )
            })
        })
        .collect();
    Ok((
        (resp.error_code, resp.error_message.map(|m| m.to_string())),
        partitions,
    ))
}

/// Produce v9 (acks=all) of one batch to one partition: its base offset,
/// or the error code and message.
pub async fn produce(
    ctx: &Context,
    who: &ClientInfo,
    topic: &str,
    partition: i32,
    batch: bytes::Bytes,
) -> Result<i64, Outcome> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let mut p = PartitionProduceData::default();
    p.index = partition;
    p.records = Some(batch);
    let mut t = TopicProduceData::default();
    t.name = TopicName(s(topic));
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 30_000;
    r.topic_data = vec![t];
    let resp = floe_proxy::server::produce_as(ctx, who, 9, r).await;
    let answered = resp
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == partition);
    match answered {
        Some(p) if p.error_code == 0 => Ok(p.base_offset),
        Some(p) => Err(outcome(p.error_code, &p.error_message)),
        None => Err((-1, Some("Produce answered no partition".to_string()))),
    }
}

/// Every transactional id the asker may describe (ListTransactions v0).
pub async fn list_transactions(
    ctx: &Context,
    who: &ClientInfo,
) -> ApiResult<ListTransactionsResponse> {
    let r = ListTransactionsRequest::default();
    let resp = ask(
        ctx,
        who,
        "ListTransactions",
        0,
        RequestKind::ListTransactions(r),
        |k| match k {
            ResponseKind::ListTransactions(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    if resp.error_code != 0 {
        return Err(ApiError::from_code(resp.error_code, "listing transactions"));
    }
    Ok(resp)
}

/// Transactional ids described (DescribeTransactions v0).
pub async fn describe_transactions(
    ctx: &Context,
    who: &ClientInfo,
    ids: &[String],
) -> ApiResult<Vec<describe_transactions_response::TransactionState>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = ids.iter().map(|id| TransactionalId(s(id))).collect();
    let resp = ask(
        ctx,
        who,
        "DescribeTransactions",
        0,
        RequestKind::DescribeTransactions(r),
        |k| match k {
            ResponseKind::DescribeTransactions(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    Ok(resp.transaction_states)
}

/// The producers each of a topic's partitions knows (DescribeProducers v0).
pub async fn describe_producers(
    ctx: &Context,
    who: &ClientInfo,
    topic: &str,
    partitions: &[i32],
) -> ApiResult<Vec<describe_producers_response::PartitionResponse>> {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    let mut t = TopicRequest::default();
    t.name = TopicName(s(topic));
    t.partition_indexes = partitions.to_vec();
    let mut r = DescribeProducersRequest::default();
    r.topics = vec![t];
    let resp = ask(
        ctx,
        who,
        "DescribeProducers",
        0,
        RequestKind::DescribeProducers(r),
        |k| match k {
            ResponseKind::DescribeProducers(m) => Some(m),
            _ => None,
        },
    )
    .await?;
    Ok(resp.topics.into_iter().flat_map(|t| t.partitions).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_reset_sends_one_entry_a_topic() {
        let plan = [
            ("a".to_owned(), 0, 5),
            ("a".to_owned(), 2, 0),
            ("b".to_owned(), 1, 7),
        ];
        let r = alter_share_request("g", &plan);
        assert_eq!(r.group_id.0.as_str(), "g");
        let topics: Vec<(&str, Vec<(i32, i64)>)> = r
            .topics
            .iter()
            .map(|t| {
                (
                    t.topic_name.0.as_str(),
                    t.partitions
                        .iter()
                        .map(|p| (p.partition_index, p.start_offset))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            topics,
            vec![("a", vec![(0, 5), (2, 0)]), ("b", vec![(1, 7)])]
        );
    }
}
