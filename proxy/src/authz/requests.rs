//! What each Kafka API needs of the ACLs, as Kafka's authorizer asks it
//! (the table in `docs/security.md`), and what a client is told when it
//! lacks it.
//!
//! [`before`] runs before a request is handled: it answers a request that
//! may not run at all, takes out of it the topics, groups and ids that
//! may not be touched, and returns what to put back into the answer: their
//! errors, and the filtering of what the principal may not see (Metadata
//! and ListGroups hide what it may not describe). Handlers never see a
//! resource the principal may not use.

use floe_metadata::acl::Operation as Op;
use floe_metadata::watch::ClusterSnapshot;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::Check;

/// What is put back into a handled request's answer.
pub type Merge = Box<dyn FnOnce(&mut ResponseKind) + Send>;

/// The outcome of [`before`].
pub enum Verdict {
    /// Handle the (possibly narrowed) request, then apply the merge.
    Serve(Option<Merge>),
    /// Answer this instead of handling the request.
    Answer(Box<ResponseKind>),
    /// Close the connection: an API Floe has no rule for, refused to all
    /// but those allowed everything on the cluster.
    Close,
}

pub const TOPIC_DENIED: i16 = 29;
pub const GROUP_DENIED: i16 = 30;
pub const CLUSTER_DENIED: i16 = 31;
pub const TXN_DENIED: i16 = 53;

fn msg(s: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.to_string()))
}

/// Removes the items `keep` refuses from `items`, and returns them.
fn take_denied<T>(items: &mut Vec<T>, mut keep: impl FnMut(&T) -> bool) -> Vec<T> {
    let (kept, denied): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(|t| keep(t));
    *items = kept;
    denied
}

fn merge<F>(f: F) -> Verdict
where
    F: FnOnce(&mut ResponseKind) + Send + 'static,
{
    Verdict::Serve(Some(Box::new(f)))
}

/// `merge` when something was denied, else nothing to do.
fn merge_if<T: Send + 'static>(
    denied: Vec<T>,
    f: impl FnOnce(&mut ResponseKind, Vec<T>) + Send + 'static,
) -> Verdict {
    if denied.is_empty() {
        Verdict::Serve(None)
    } else {
        merge(move |r| f(r, denied))
    }
}

/// Decides `req` (of `version`) for `c`. Without an authorizer (or for a
/// super user) everything is served as sent. Either way, the authorized
/// operations a describing request asks for are those of `c` (every
/// operation without an authorizer, as Kafka answers).
pub fn before(req: &mut RequestKind, version: i16, c: &Check, snap: &ClusterSnapshot) -> Verdict {
    let ops = authorized_operations(req, c);
    let verdict = if c.is_on() {
        restrict(req, version, c, snap)
    } else {
        Verdict::Serve(None)
    };
    match (verdict, ops) {
        (Verdict::Serve(Some(m)), Some(ops)) => merge(move |resp| {
            m(resp);
            ops(resp);
        }),
        (Verdict::Serve(None), Some(ops)) => Verdict::Serve(Some(ops)),
        (verdict, _) => verdict,
    }
}

/// Fills the authorized-operations fields of the describing APIs
/// (Metadata, DescribeTopicPartitions, DescribeCluster, DescribeGroups,
/// ConsumerGroupDescribe, ShareGroupDescribe) when the request asks for
/// them, for the resources answered without an error.
fn authorized_operations(req: &RequestKind, c: &Check) -> Option<Merge> {
    let wanted = match req {
        RequestKind::Metadata(r) => {
            r.include_topic_authorized_operations || r.include_cluster_authorized_operations
        }
        RequestKind::DescribeTopicPartitions(_) => true,
        RequestKind::DescribeCluster(r) => r.include_cluster_authorized_operations,
        RequestKind::DescribeGroups(r) => r.include_authorized_operations,
        RequestKind::ConsumerGroupDescribe(r) => r.include_authorized_operations,
        RequestKind::ShareGroupDescribe(r) => r.include_authorized_operations,
        _ => false,
    };
    if !wanted {
        // Every other request: nothing to fill, no clone of the check.
        return None;
    }
    let c = c.clone();
    let group_ops = move |c: &Check, name: &str| operations(GROUP_OPS, |op| c.group(op, name));
    let m: Merge = match req {
        RequestKind::Metadata(r) => {
            let (topics, cluster) = (
                r.include_topic_authorized_operations,
                r.include_cluster_authorized_operations,
            );
            Box::new(move |resp| {
                let ResponseKind::Metadata(resp) = resp else {
                    return;
                };
                if topics {
                    for t in resp.topics.iter_mut().filter(|t| t.error_code == 0) {
                        let name = opt_name(&t.name).to_string();
                        t.topic_authorized_operations =
                            operations(TOPIC_OPS, |op| c.topic(op, &name));
                    }
                }
                if cluster {
                    resp.cluster_authorized_operations =
                        operations(CLUSTER_OPS, |op| c.cluster(op));
                }
            })
        }
        // Kafka always answers them here (the request has no flag).
        RequestKind::DescribeTopicPartitions(_) => Box::new(move |resp| {
            if let ResponseKind::DescribeTopicPartitions(resp) = resp {
                for t in resp.topics.iter_mut().filter(|t| t.error_code == 0) {
                    let name = opt_name(&t.name).to_string();
                    t.topic_authorized_operations = operations(TOPIC_OPS, |op| c.topic(op, &name));
                }
            }
        }),
        RequestKind::DescribeCluster(_) => Box::new(move |resp| {
            if let ResponseKind::DescribeCluster(resp) = resp
                && resp.error_code == 0
            {
                resp.cluster_authorized_operations = operations(CLUSTER_OPS, |op| c.cluster(op));
            }
        }),
        RequestKind::DescribeGroups(_) => Box::new(move |resp| {
            if let ResponseKind::DescribeGroups(resp) = resp {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    g.authorized_operations = group_ops(&c, &g.group_id);
                }
            }
        }),
        RequestKind::ConsumerGroupDescribe(_) => Box::new(move |resp| {
            if let ResponseKind::ConsumerGroupDescribe(resp) = resp {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    g.authorized_operations = group_ops(&c, &g.group_id);
                }
            }
        }),
        RequestKind::ShareGroupDescribe(_) => Box::new(move |resp| {
            if let ResponseKind::ShareGroupDescribe(resp) = resp {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    g.authorized_operations = group_ops(&c, &g.group_id);
                }
            }
        }),
        _ => return None,
    };
    Some(m)
}

fn restrict(req: &mut RequestKind, version: i16, c: &Check, snap: &ClusterSnapshot) -> Verdict {
    match req {
        // Needed before anyone is known, and harmless.
        RequestKind::ApiVersions(_)
        | RequestKind::SaslHandshake(_)
        | RequestKind::SaslAuthenticate(_)
        | RequestKind::DescribeCluster(_) => Verdict::Serve(None),
        // The ACL APIs check the cluster themselves (`crate::acls`).
        RequestKind::CreateAcls(_) | RequestKind::DescribeAcls(_) | RequestKind::DeleteAcls(_) => {
            Verdict::Serve(None)
        }
        RequestKind::Metadata(r) => metadata(r, c, snap),
        RequestKind::DescribeTopicPartitions(r) => {
            let named: Vec<String> = r.topics.iter().map(|t| t.name.to_string()).collect();
            let c = c.clone();
            merge(move |resp| {
                if let ResponseKind::DescribeTopicPartitions(resp) = resp {
                    resp.topics.retain(|t| {
                        let name = opt_name(&t.name);
                        c.topic(Op::Describe, name) || named.iter().any(|n| n == name)
                    });
                    for t in &mut resp.topics {
                        if !c.topic(Op::Describe, opt_name(&t.name)) {
                            t.error_code = TOPIC_DENIED;
                            t.partitions.clear();
                            t.topic_id = Default::default();
                        }
                    }
                }
            })
        }
        RequestKind::ListOffsets(r) => {
            let denied = take_denied(&mut r.topics, |t| c.topic(Op::Describe, &t.name));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::ListOffsets(resp) = resp {
                    for t in denied {
                        resp.topics.push(
                            list_offsets_response::ListOffsetsTopicResponse::default()
                                .with_name(t.name)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            list_offsets_response::ListOffsetsPartitionResponse::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(TOPIC_DENIED)
                                                .with_timestamp(-1)
                                                .with_offset(-1)
                                        })
                                        .collect(),
                                ),
                        );
                    }
                }
            })
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            let denied = take_denied(&mut r.topics, |t| c.topic(Op::Describe, &t.topic));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::OffsetForLeaderEpoch(resp) = resp {
                    for t in denied {
                        resp.topics.push(
                            offset_for_leader_epoch_response::OffsetForLeaderTopicResult::default()
                                .with_topic(t.topic)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            offset_for_leader_epoch_response::EpochEndOffset::default()
                                                .with_partition(p.partition)
                                                .with_error_code(TOPIC_DENIED)
                                                .with_leader_epoch(-1)
                                                .with_end_offset(-1)
                                        })
                                        .collect(),
                                ),
                        );
                    }
                }
            })
        }
        RequestKind::DeleteRecords(r) => {
            let denied = take_denied(&mut r.topics, |t| c.topic(Op::Delete, &t.name));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::DeleteRecords(resp) = resp {
                    for t in denied {
                        resp.topics.push(
                            delete_records_response::DeleteRecordsTopicResult::default()
                                .with_name(t.name)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            delete_records_response::DeleteRecordsPartitionResult::default()
                                                .with_partition_index(p.partition_index)
                                                .with_low_watermark(-1)
                                                .with_error_code(TOPIC_DENIED)
                                        })
                                        .collect(),
                                ),
                        );
                    }
                }
            })
        }
        RequestKind::DescribeProducers(r) => {
            let denied = take_denied(&mut r.topics, |t| c.topic(Op::Read, &t.name));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::DescribeProducers(resp) = resp {
                    for t in denied {
                        resp.topics.push(
                            describe_producers_response::TopicResponse::default()
                                .with_name(t.name)
                                .with_partitions(
                                    t.partition_indexes
                                        .iter()
                                        .map(|p| {
                                            describe_producers_response::PartitionResponse::default(
                                            )
                                            .with_partition_index(*p)
                                            .with_error_code(TOPIC_DENIED)
                                        })
                                        .collect(),
                                ),
                        );
                    }
                }
            })
        }
        RequestKind::OffsetCommit(r) => {
            let group_ok = c.group(Op::Read, &r.group_id);
            let denied = take_denied(&mut r.topics, |t| group_ok && c.topic(Op::Read, &t.name));
            let code = if group_ok { TOPIC_DENIED } else { GROUP_DENIED };
            let parts = move |ts: Vec<offset_commit_request::OffsetCommitRequestTopic>| {
                ts.into_iter()
                    .map(|t| {
                        offset_commit_response::OffsetCommitResponseTopic::default()
                            .with_name(t.name)
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        offset_commit_response::OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect::<Vec<_>>()
            };
            if !group_ok {
                return answer(ResponseKind::OffsetCommit(
                    OffsetCommitResponse::default().with_topics(parts(denied)),
                ));
            }
            merge_if(denied, move |resp, denied| {
                if let ResponseKind::OffsetCommit(resp) = resp {
                    resp.topics.extend(parts(denied));
                }
            })
        }
        RequestKind::TxnOffsetCommit(r) => {
            let code = if !c.txn_id(Op::Write, &r.transactional_id) {
                Some(TXN_DENIED)
            } else if !c.group(Op::Read, &r.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            let denied = take_denied(&mut r.topics, |t| {
                code.is_none() && c.topic(Op::Read, &t.name)
            });
            let error = code.unwrap_or(TOPIC_DENIED);
            let parts = move |ts: Vec<txn_offset_commit_request::TxnOffsetCommitRequestTopic>| {
                ts.into_iter()
                    .map(|t| {
                        txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(error)
                                    })
                                    .collect(),
                            )
                    })
                    .collect::<Vec<_>>()
            };
            if code.is_some() {
                return answer(ResponseKind::TxnOffsetCommit(
                    TxnOffsetCommitResponse::default().with_topics(parts(denied)),
                ));
            }
            merge_if(denied, move |resp, denied| {
                if let ResponseKind::TxnOffsetCommit(resp) = resp {
                    resp.topics.extend(parts(denied));
                }
            })
        }
        RequestKind::OffsetFetch(r) => offset_fetch(r, version, c),
        RequestKind::FindCoordinator(r) => find_coordinator(r, version, c),
        RequestKind::JoinGroup(r) => {
            if c.group(Op::Read, &r.group_id) {
                return Verdict::Serve(None);
            }
            answer(ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(GROUP_DENIED)
                    .with_generation_id(-1),
            ))
        }
        RequestKind::SyncGroup(r) => whole(c.group(Op::Read, &r.group_id), || {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(GROUP_DENIED))
        }),
        RequestKind::Heartbeat(r) => whole(c.group(Op::Read, &r.group_id), || {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(GROUP_DENIED))
        }),
        RequestKind::LeaveGroup(r) => whole(c.group(Op::Read, &r.group_id), || {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(GROUP_DENIED))
        }),
        RequestKind::ConsumerGroupHeartbeat(r) => whole(c.group(Op::Read, &r.group_id), || {
            ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(GROUP_DENIED)
                    .with_error_message(msg("not authorized to read the group")),
            )
        }),
        RequestKind::DescribeGroups(r) => {
            let denied = take_denied(&mut r.groups, |g| c.group(Op::Describe, g));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::DescribeGroups(resp) = resp {
                    for g in denied {
                        resp.groups.push(
                            describe_groups_response::DescribedGroup::default()
                                .with_group_id(g)
                                .with_error_code(GROUP_DENIED),
                        );
                    }
                }
            })
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            let denied = take_denied(&mut r.group_ids, |g| c.group(Op::Describe, g));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::ConsumerGroupDescribe(resp) = resp {
                    for g in denied {
                        resp.groups.push(
                            consumer_group_describe_response::DescribedGroup::default()
                                .with_group_id(g)
                                .with_error_code(GROUP_DENIED)
                                .with_error_message(msg("not authorized to describe the group")),
                        );
                    }
                }
            })
        }
        RequestKind::ListGroups(_) => {
            if c.cluster(Op::Describe) {
                return Verdict::Serve(None);
            }
            let c = c.clone();
            merge(move |resp| {
                if let ResponseKind::ListGroups(resp) = resp {
                    resp.groups.retain(|g| c.group(Op::Describe, &g.group_id));
                }
            })
        }
        RequestKind::DeleteGroups(r) => {
            let denied = take_denied(&mut r.groups_names, |g| c.group(Op::Delete, g));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::DeleteGroups(resp) = resp {
                    for g in denied {
                        resp.results.push(
                            delete_groups_response::DeletableGroupResult::default()
                                .with_group_id(g)
                                .with_error_code(GROUP_DENIED),
                        );
                    }
                }
            })
        }
        RequestKind::OffsetDelete(r) => {
            if !c.group(Op::Delete, &r.group_id) {
                return answer(ResponseKind::OffsetDelete(
                    OffsetDeleteResponse::default().with_error_code(GROUP_DENIED),
                ));
            }
            let denied = take_denied(&mut r.topics, |t| c.topic(Op::Read, &t.name));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::OffsetDelete(resp) = resp {
                    for t in denied {
                        resp.topics.push(
                            offset_delete_response::OffsetDeleteResponseTopic::default()
                                .with_name(t.name)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            offset_delete_response::OffsetDeleteResponsePartition::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(TOPIC_DENIED)
                                        })
                                        .collect(),
                                ),
                        );
                    }
                }
            })
        }
        RequestKind::CreateTopics(r) => {
            let cluster = c.cluster(Op::Create);
            let denied = take_denied(&mut r.topics, |t| cluster || c.topic(Op::Create, &t.name));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::CreateTopics(resp) = resp {
                    for t in denied {
                        resp.topics.push(
                            create_topics_response::CreatableTopicResult::default()
                                .with_name(t.name)
                                .with_error_code(TOPIC_DENIED)
                                .with_error_message(msg("not authorized to create the topic"))
                                .with_num_partitions(-1)
                                .with_replication_factor(-1),
                        );
                    }
                }
            })
        }
        RequestKind::DeleteTopics(r) => {
            let denied_names = take_denied(&mut r.topic_names, |t| c.topic(Op::Delete, t));
            let denied_states = take_denied(&mut r.topics, |t| {
                let name = t.name.as_ref().map(|n| n.to_string()).or_else(|| {
                    snap.by_id
                        .get(&floe_metadata::ids::TopicId(t.topic_id))
                        .map(|i| i.name.clone())
                });
                // An id no topic has is answered by the handler (unknown).
                name.is_none_or(|n| c.topic(Op::Delete, &n))
            });
            let denied: Vec<(Option<String>, uuid::Uuid)> = denied_names
                .into_iter()
                .map(|n| (Some(n.to_string()), uuid::Uuid::nil()))
                .chain(
                    denied_states
                        .into_iter()
                        .map(|t| (t.name.map(|n| n.to_string()), t.topic_id)),
                )
                .collect();
            merge_if(denied, |resp, denied| {
                if let ResponseKind::DeleteTopics(resp) = resp {
                    for (name, id) in denied {
                        resp.responses.push(
                            delete_topics_response::DeletableTopicResult::default()
                                .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
                                .with_topic_id(id)
                                .with_error_code(TOPIC_DENIED),
                        );
                    }
                }
            })
        }
        RequestKind::CreatePartitions(r) => {
            let denied = take_denied(&mut r.topics, |t| c.topic(Op::Alter, &t.name));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::CreatePartitions(resp) = resp {
                    for t in denied {
                        resp.results.push(
                            create_partitions_response::CreatePartitionsTopicResult::default()
                                .with_name(t.name)
                                .with_error_code(TOPIC_DENIED),
                        );
                    }
                }
            })
        }
        RequestKind::DescribeConfigs(r) => {
            let denied = take_denied(&mut r.resources, |res| {
                config_allowed(
                    c,
                    res.resource_type,
                    &res.resource_name,
                    Op::DescribeConfigs,
                )
            });
            merge_if(denied, |resp, denied| {
                if let ResponseKind::DescribeConfigs(resp) = resp {
                    for res in denied {
                        resp.results.push(
                            describe_configs_response::DescribeConfigsResult::default()
                                .with_error_code(config_code(res.resource_type))
                                .with_resource_type(res.resource_type)
                                .with_resource_name(res.resource_name),
                        );
                    }
                }
            })
        }
        RequestKind::AlterConfigs(r) => {
            let denied = take_denied(&mut r.resources, |res| {
                config_allowed(c, res.resource_type, &res.resource_name, Op::AlterConfigs)
            });
            merge_if(denied, |resp, denied| {
                if let ResponseKind::AlterConfigs(resp) = resp {
                    for res in denied {
                        resp.responses.push(
                            alter_configs_response::AlterConfigsResourceResponse::default()
                                .with_error_code(config_code(res.resource_type))
                                .with_resource_type(res.resource_type)
                                .with_resource_name(res.resource_name),
                        );
                    }
                }
            })
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            let denied = take_denied(&mut r.resources, |res| {
                config_allowed(c, res.resource_type, &res.resource_name, Op::AlterConfigs)
            });
            merge_if(denied, |resp, denied| {
                if let ResponseKind::IncrementalAlterConfigs(resp) = resp {
                    for res in denied {
                        resp.responses.push(
                            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                                .with_error_code(config_code(res.resource_type))
                                .with_resource_type(res.resource_type)
                                .with_resource_name(res.resource_name),
                        );
                    }
                }
            })
        }
        RequestKind::DescribeLogDirs(_) => whole(c.cluster(Op::Describe), || {
            ResponseKind::DescribeLogDirs(
                DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED),
            )
        }),
        RequestKind::DescribeClientQuotas(_) => whole(c.cluster(Op::DescribeConfigs), || {
            ResponseKind::DescribeClientQuotas(
                DescribeClientQuotasResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(msg("not authorized to describe the cluster's configs")),
            )
        }),
        RequestKind::AlterClientQuotas(r) => {
            if c.cluster(Op::AlterConfigs) {
                return Verdict::Serve(None);
            }
            let entries = r
                .entries
                .iter()
                .map(|e| {
                    alter_client_quotas_response::EntryData::default()
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(msg("not authorized to alter the cluster's configs"))
                        .with_entity(
                            e.entity
                                .iter()
                                .map(|p| {
                                    alter_client_quotas_response::EntityData::default()
                                        .with_entity_type(p.entity_type.clone())
                                        .with_entity_name(p.entity_name.clone())
                                })
                                .collect(),
                        )
                })
                .collect();
            answer(ResponseKind::AlterClientQuotas(
                AlterClientQuotasResponse::default().with_entries(entries),
            ))
        }
        RequestKind::DescribeUserScramCredentials(_) => whole(c.cluster(Op::Describe), || {
            ResponseKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(msg("not authorized to describe the cluster")),
            )
        }),
        RequestKind::AlterUserScramCredentials(r) => {
            if c.cluster(Op::Alter) {
                return Verdict::Serve(None);
            }
            let mut users: Vec<StrBytes> = r
                .deletions
                .iter()
                .map(|d| d.name.clone())
                .chain(r.upsertions.iter().map(|u| u.name.clone()))
                .collect();
            users.dedup();
            answer(ResponseKind::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(
                    users
                        .into_iter()
                        .map(|u| {
                            alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                                .with_user(u)
                                .with_error_code(CLUSTER_DENIED)
                                .with_error_message(msg("not authorized to alter the cluster"))
                        })
                        .collect(),
                ),
            ))
        }
        RequestKind::InitProducerId(r) => {
            let (ok, code) = match &r.transactional_id {
                Some(id) => (c.txn_id(Op::Write, id), TXN_DENIED),
                None => (c.writes_any_topic(), CLUSTER_DENIED),
            };
            whole(ok, || {
                ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_error_code(code)
                        .with_producer_id((-1).into())
                        .with_producer_epoch(-1),
                )
            })
        }
        RequestKind::AddPartitionsToTxn(r) => add_partitions_to_txn(r, version, c),
        RequestKind::AddOffsetsToTxn(r) => {
            let code = if !c.txn_id(Op::Write, &r.transactional_id) {
                TXN_DENIED
            } else if !c.group(Op::Read, &r.group_id) {
                GROUP_DENIED
            } else {
                return Verdict::Serve(None);
            };
            answer(ResponseKind::AddOffsetsToTxn(
                AddOffsetsToTxnResponse::default().with_error_code(code),
            ))
        }
        RequestKind::EndTxn(r) => whole(c.txn_id(Op::Write, &r.transactional_id), || {
            ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(TXN_DENIED))
        }),
        RequestKind::DescribeTransactions(r) => {
            let denied = take_denied(&mut r.transactional_ids, |t| c.txn_id(Op::Describe, t));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::DescribeTransactions(resp) = resp {
                    for t in denied {
                        resp.transaction_states.push(
                            describe_transactions_response::TransactionState::default()
                                .with_transactional_id(t)
                                .with_error_code(TXN_DENIED)
                                .with_producer_id((-1).into())
                                .with_producer_epoch(-1),
                        );
                    }
                }
            })
        }
        RequestKind::ListTransactions(_) => {
            let c = c.clone();
            merge(move |resp| {
                if let ResponseKind::ListTransactions(resp) = resp {
                    resp.transaction_states
                        .retain(|t| c.txn_id(Op::Describe, &t.transactional_id));
                }
            })
        }
        RequestKind::ShareGroupHeartbeat(r) => whole(c.group(Op::Read, &r.group_id), || {
            ResponseKind::ShareGroupHeartbeat(
                ShareGroupHeartbeatResponse::default()
                    .with_error_code(GROUP_DENIED)
                    .with_error_message(msg("not authorized to read the group")),
            )
        }),
        RequestKind::ShareGroupDescribe(r) => {
            let denied = take_denied(&mut r.group_ids, |g| c.group(Op::Describe, g));
            merge_if(denied, |resp, denied| {
                if let ResponseKind::ShareGroupDescribe(resp) = resp {
                    for g in denied {
                        resp.groups.push(
                            share_group_describe_response::DescribedGroup::default()
                                .with_group_id(g)
                                .with_error_code(GROUP_DENIED)
                                .with_error_message(msg("not authorized to describe the group")),
                        );
                    }
                }
            })
        }
        RequestKind::ShareFetch(r) => {
            let group = r
                .group_id
                .as_ref()
                .map(|g| g.to_string())
                .unwrap_or_default();
            let code = share_code(
                c,
                &group,
                Op::Read,
                r.topics.iter().map(|t| t.topic_id),
                snap,
            );
            whole(code.is_none(), || {
                let code = code.unwrap_or(TOPIC_DENIED);
                ResponseKind::ShareFetch(
                    ShareFetchResponse::default()
                        .with_error_code(code)
                        .with_error_message(msg("not authorized")),
                )
            })
        }
        RequestKind::ShareAcknowledge(r) => {
            let group = r
                .group_id
                .as_ref()
                .map(|g| g.to_string())
                .unwrap_or_default();
            let code = share_code(
                c,
                &group,
                Op::Read,
                r.topics.iter().map(|t| t.topic_id),
                snap,
            );
            whole(code.is_none(), || {
                let code = code.unwrap_or(TOPIC_DENIED);
                ResponseKind::ShareAcknowledge(
                    ShareAcknowledgeResponse::default()
                        .with_error_code(code)
                        .with_error_message(msg("not authorized")),
                )
            })
        }
        RequestKind::DescribeShareGroupOffsets(r) => {
            let c = c.clone();
            let _ = r;
            merge(move |resp| {
                if let ResponseKind::DescribeShareGroupOffsets(resp) = resp {
                    for g in &mut resp.groups {
                        if !c.group(Op::Describe, &g.group_id) {
                            g.error_code = GROUP_DENIED;
                            g.error_message = msg("not authorized to describe the group");
                            g.topics.clear();
                        } else {
                            g.topics.retain(|t| c.topic(Op::Describe, &t.topic_name));
                        }
                    }
                }
            })
        }
        RequestKind::AlterShareGroupOffsets(r) => {
            let ok = c.group(Op::Read, &r.group_id)
                && r.topics.iter().all(|t| c.topic(Op::Read, &t.topic_name));
            whole(ok, || {
                ResponseKind::AlterShareGroupOffsets(
                    AlterShareGroupOffsetsResponse::default()
                        .with_error_code(GROUP_DENIED)
                        .with_error_message(msg("not authorized to read the group and its topics")),
                )
            })
        }
        RequestKind::DeleteShareGroupOffsets(r) => {
            let ok = c.group(Op::Delete, &r.group_id)
                && r.topics.iter().all(|t| c.topic(Op::Read, &t.topic_name));
            whole(ok, || {
                ResponseKind::DeleteShareGroupOffsets(
                    DeleteShareGroupOffsetsResponse::default()
                        .with_error_code(GROUP_DENIED)
                        .with_error_message(msg("not authorized to delete the group's offsets")),
                )
            })
        }
        // Produce and Fetch are decided by [`produce`] and [`fetch`]. Any
        // other API needs the whole cluster.
        _ => {
            if c.cluster(Op::All) {
                Verdict::Serve(None)
            } else {
                Verdict::Close
            }
        }
    }
}

/// A topic's name, or the empty name.
fn opt_name(n: &Option<TopicName>) -> &str {
    n.as_ref().map_or("", |n| &***n)
}

/// Answer `r` instead of handling the request.
fn answer(r: ResponseKind) -> Verdict {
    Verdict::Answer(Box::new(r))
}

/// Serve when `ok`, else answer `refusal()`.
fn whole(ok: bool, refusal: impl FnOnce() -> ResponseKind) -> Verdict {
    if ok {
        Verdict::Serve(None)
    } else {
        answer(refusal())
    }
}

/// Kafka's config resource types: TOPIC 2, BROKER 4, BROKER_LOGGER 8,
/// CLIENT_METRICS 16, GROUP 32.
fn config_allowed(c: &Check, resource_type: i8, name: &str, op: Op) -> bool {
    match resource_type {
        2 => c.topic(op, name),
        32 => c.group(op, name),
        _ => c.cluster(op),
    }
}

fn config_code(resource_type: i8) -> i16 {
    match resource_type {
        2 => TOPIC_DENIED,
        32 => GROUP_DENIED,
        _ => CLUSTER_DENIED,
    }
}

/// The code refusing a share request on `group` and the topics of
/// `topic_ids` (none: allowed).
fn share_code(
    c: &Check,
    group: &str,
    op: Op,
    mut topic_ids: impl Iterator<Item = uuid::Uuid>,
    snap: &ClusterSnapshot,
) -> Option<i16> {
    if !c.group(op, group) {
        return Some(GROUP_DENIED);
    }
    topic_ids
        .any(|id| {
            snap.by_id
                .get(&floe_metadata::ids::TopicId(id))
                .is_some_and(|t| !c.topic(op, &t.name))
        })
        .then_some(TOPIC_DENIED)
}

fn metadata(r: &mut MetadataRequest, c: &Check, snap: &ClusterSnapshot) -> Verdict {
    let mut denied: Vec<String> = Vec::new();
    if let Some(topics) = &mut r.topics {
        let cluster_create = r.allow_auto_topic_creation && c.cluster(Op::Create);
        denied = take_denied(topics, |t| {
            let Some(name) = t.name.as_ref().map(|n| &***n) else {
                return true;
            };
            if !c.topic(Op::Describe, name) {
                return false;
            }
            // Auto-creation needs CREATE on the cluster or the topic.
            snap.topics.contains_key(name)
                || !r.allow_auto_topic_creation
                || cluster_create
                || c.topic(Op::Create, name)
        })
        .into_iter()
        .filter_map(|t| t.name.map(|n| n.to_string()))
        .collect();
    }
    let c = c.clone();
    merge(move |resp| {
        let ResponseKind::Metadata(resp) = resp else {
            return;
        };
        resp.topics
            .retain(|t| c.topic(Op::Describe, opt_name(&t.name)));
        for t in denied {
            resp.topics.push(
                metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(t))))
                    .with_error_code(TOPIC_DENIED),
            );
        }
    })
}

const TOPIC_OPS: &[Op] = &[
    Op::Read,
    Op::Write,
    Op::Create,
    Op::Delete,
    Op::Alter,
    Op::Describe,
    Op::DescribeConfigs,
    Op::AlterConfigs,
];

const CLUSTER_OPS: &[Op] = &[
    Op::Create,
    Op::Alter,
    Op::Describe,
    Op::ClusterAction,
    Op::DescribeConfigs,
    Op::AlterConfigs,
    Op::IdempotentWrite,
];

/// A group's operations as Kafka 4 reports them (with the group configs').
const GROUP_OPS: &[Op] = &[
    Op::Read,
    Op::Describe,
    Op::Delete,
    Op::DescribeConfigs,
    Op::AlterConfigs,
];

/// Kafka's authorized-operations bit field: bit `code` for each allowed
/// operation.
fn operations(ops: &[Op], allowed: impl Fn(Op) -> bool) -> i32 {
    ops.iter()
        .filter(|op| allowed(**op))
        .fold(0, |acc, op| acc | (1 << op.code()))
}

fn offset_fetch(r: &mut OffsetFetchRequest, version: i16, c: &Check) -> Verdict {
    if version < 8 {
        if !c.group(Op::Describe, &r.group_id) {
            let topics = r
                .topics
                .iter()
                .flatten()
                .map(|t| {
                    offset_fetch_response::OffsetFetchResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partition_indexes
                                .iter()
                                .map(|p| {
                                    offset_fetch_response::OffsetFetchResponsePartition::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(-1)
                                        .with_error_code(GROUP_DENIED)
                                })
                                .collect(),
                        )
                })
                .collect();
            return answer(ResponseKind::OffsetFetch(
                OffsetFetchResponse::default()
                    .with_error_code(GROUP_DENIED)
                    .with_topics(topics),
            ));
        }
        let denied = match &mut r.topics {
            Some(ts) => take_denied(ts, |t| c.topic(Op::Describe, &t.name)),
            None => Vec::new(),
        };
        let c = c.clone();
        return merge(move |resp| {
            if let ResponseKind::OffsetFetch(resp) = resp {
                resp.topics.retain(|t| c.topic(Op::Describe, &t.name));
                for t in denied {
                    resp.topics.push(
                        offset_fetch_response::OffsetFetchResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|p| {
                                        offset_fetch_response::OffsetFetchResponsePartition::default()
                                            .with_partition_index(*p)
                                            .with_committed_offset(-1)
                                            .with_error_code(TOPIC_DENIED)
                                    })
                                    .collect(),
                            ),
                    );
                }
            }
        });
    }
    let denied_groups = take_denied(&mut r.groups, |g| c.group(Op::Describe, &g.group_id));
    let mut denied_topics = Vec::new();
    for g in &mut r.groups {
        if let Some(ts) = &mut g.topics {
            let d = take_denied(ts, |t| c.topic(Op::Describe, &t.name));
            if !d.is_empty() {
                denied_topics.push((g.group_id.clone(), d));
            }
        }
    }
    let c = c.clone();
    merge(move |resp| {
        let ResponseKind::OffsetFetch(resp) = resp else {
            return;
        };
        for g in &mut resp.groups {
            g.topics.retain(|t| c.topic(Op::Describe, &t.name));
            if let Some((_, d)) = denied_topics.iter().find(|(id, _)| *id == g.group_id) {
                for t in d {
                    g.topics.push(
                        offset_fetch_response::OffsetFetchResponseTopics::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|p| {
                                        offset_fetch_response::OffsetFetchResponsePartitions::default()
                                            .with_partition_index(*p)
                                            .with_committed_offset(-1)
                                            .with_error_code(TOPIC_DENIED)
                                    })
                                    .collect(),
                            ),
                    );
                }
            }
        }
        for g in denied_groups {
            resp.groups.push(
                offset_fetch_response::OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_error_code(GROUP_DENIED),
            );
        }
    })
}

/// FindCoordinator's key types: 0 group, 1 transactional id, 2 share
/// (`group:topic-id:partition`, asked by brokers).
fn key_allowed(c: &Check, key_type: i8, key: &str) -> (bool, i16) {
    match key_type {
        0 => (c.group(Op::Describe, key), GROUP_DENIED),
        1 => (c.txn_id(Op::Describe, key), TXN_DENIED),
        _ => (c.cluster(Op::ClusterAction), CLUSTER_DENIED),
    }
}

fn find_coordinator(r: &mut FindCoordinatorRequest, version: i16, c: &Check) -> Verdict {
    if version < 4 {
        let (ok, code) = key_allowed(c, r.key_type, &r.key);
        return whole(ok, || {
            ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default()
                    .with_error_code(code)
                    .with_error_message(msg("not authorized"))
                    .with_node_id((-1).into())
                    .with_port(-1),
            )
        });
    }
    let key_type = r.key_type;
    let denied = take_denied(&mut r.coordinator_keys, |k| key_allowed(c, key_type, k).0);
    let code = key_allowed(c, key_type, "").1;
    merge_if(denied, move |resp, denied| {
        if let ResponseKind::FindCoordinator(resp) = resp {
            for k in denied {
                resp.coordinators.push(
                    find_coordinator_response::Coordinator::default()
                        .with_key(k)
                        .with_node_id((-1).into())
                        .with_port(-1)
                        .with_error_code(code)
                        .with_error_message(msg("not authorized")),
                );
            }
        }
    })
}

fn add_partitions_to_txn(r: &mut AddPartitionsToTxnRequest, version: i16, c: &Check) -> Verdict {
    if version >= 4 {
        // The batched form is the brokers' (KIP-890): the cluster's.
        return whole(c.cluster(Op::ClusterAction), || {
            ResponseKind::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_error_code(CLUSTER_DENIED),
            )
        });
    }
    let txn_ok = c.txn_id(Op::Write, &r.v3_and_below_transactional_id);
    let topics_ok: Vec<bool> = r
        .v3_and_below_topics
        .iter()
        .map(|t| c.topic(Op::Write, &t.name))
        .collect();
    if txn_ok && topics_ok.iter().all(|ok| *ok) {
        return Verdict::Serve(None);
    }
    // Nothing is added: the denied get their error, the others
    // OPERATION_NOT_ATTEMPTED, as Kafka answers.
    let results = r
        .v3_and_below_topics
        .iter()
        .zip(topics_ok)
        .map(|(t, ok)| {
            let code = if !txn_ok {
                TXN_DENIED
            } else if !ok {
                TOPIC_DENIED
            } else {
                ResponseError::OperationNotAttempted.code()
            };
            add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    answer(ResponseKind::AddPartitionsToTxn(
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
    ))
}

/// Takes the topics `c` may not write out of a Produce, and returns the
/// answer's entries for them (a transactional produce whose id may not
/// write: every partition).
pub fn produce(req: &mut ProduceRequest, c: &Check) -> Vec<produce_response::TopicProduceResponse> {
    if !c.is_on() {
        return Vec::new();
    }
    let txn_ok = req
        .transactional_id
        .as_ref()
        .is_none_or(|id| c.txn_id(Op::Write, id));
    let denied = take_denied(&mut req.topic_data, |t| {
        txn_ok && c.topic(Op::Write, &t.name)
    });
    let code = if txn_ok { TOPIC_DENIED } else { TXN_DENIED };
    denied
        .into_iter()
        .map(|t| {
            produce_response::TopicProduceResponse::default()
                .with_name(t.name)
                .with_topic_id(t.topic_id)
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            produce_response::PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code)
                                .with_base_offset(-1)
                                .with_log_append_time_ms(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect(),
                )
        })
        .collect()
}

/// Takes the topics `c` may not read out of a Fetch's answer: their
/// partitions carry TOPIC_AUTHORIZATION_FAILED and no records (a fetch
/// session's partitions included, whenever they were added).
pub fn fetch(answer: &mut crate::codec::FetchAnswer, c: &Check) {
    if !c.is_on() {
        return;
    }
    let mut i = 0;
    for t in &mut answer.resp.responses {
        let ok = c.topic(Op::Read, &t.topic);
        for p in &mut t.partitions {
            if !ok {
                p.error_code = TOPIC_DENIED;
                p.records = None;
                p.high_watermark = -1;
                p.last_stable_offset = -1;
                p.log_start_offset = -1;
                p.aborted_transactions = None;
                if let Some(pieces) = answer.records.get_mut(i) {
                    pieces.clear();
                }
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests;
