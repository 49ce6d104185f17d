//! The JSON shapes of etcd's v3 gateway that this module uses, and how to build requests.
//!
//! The gateway marshals protobuf with the field names of the `.proto` files (`create_revision`,
//! `ID`, `TTL`, `dbSize`), writes 64-bit integers as JSON strings, bytes as base64, and omits
//! fields that hold their default value (`succeeded: false`, empty `kvs`, event type `PUT`).
//! Every struct here therefore defaults every field, and integers accept strings or numbers.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

/// Encodes bytes as the gateway wants them: standard base64.
pub(crate) fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes a base64 field; `None` when it is not valid base64.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

/// The smallest key greater than every key that starts with `prefix` (etcd's prefix range end).
///
/// # Panics
///
/// When `prefix` is empty or all `0xff` bytes, for which no such key exists; callers build
/// prefixes from text ending in `/`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    panic!("prefix {prefix:?} has no range end");
}

fn int<'de, D: Deserializer<'de>, T: std::str::FromStr + TryFrom<u64> + TryFrom<i64>>(
    deserializer: D,
) -> Result<T, D::Error> {
    let value = Value::deserialize(deserializer)?;
    let parsed = match &value {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => number
            .as_u64()
            .and_then(|n| T::try_from(n).ok())
            .or_else(|| number.as_i64().and_then(|n| T::try_from(n).ok())),
        _ => None,
    };
    parsed.ok_or_else(|| serde::de::Error::custom(format!("not a 64-bit integer: {value}")))
}

/// `etcdserverpb.ResponseHeader`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Header {
    #[serde(deserialize_with = "int")]
    pub(crate) member_id: u64,
    #[serde(deserialize_with = "int")]
    pub(crate) revision: i64,
    #[serde(deserialize_with = "int")]
    pub(crate) raft_term: u64,
}

/// `mvccpb.KeyValue` (the value is not used here).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct KeyValue {
    pub(crate) key: String,
    #[serde(deserialize_with = "int")]
    pub(crate) create_revision: i64,
    #[serde(deserialize_with = "int")]
    pub(crate) lease: i64,
}

/// `RangeResponse`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RangeResponse {
    pub(crate) header: Header,
    pub(crate) kvs: Vec<KeyValue>,
}

/// One entry of `TxnResponse.responses`: the ops used here.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ResponseOp {
    pub(crate) response_range: Option<RangeResponse>,
}

/// `TxnResponse`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TxnResponse {
    pub(crate) header: Header,
    pub(crate) succeeded: bool,
    pub(crate) responses: Vec<ResponseOp>,
}

/// `LeaseGrantResponse` and `LeaseKeepAliveResponse` (`TTL` 0 or absent: no such lease).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct LeaseResponse {
    #[serde(rename = "ID", deserialize_with = "int")]
    pub(crate) id: i64,
    #[serde(rename = "TTL", deserialize_with = "int")]
    pub(crate) ttl: i64,
}

/// `StatusResponse`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StatusResponse {
    pub(crate) header: Header,
    #[serde(deserialize_with = "int")]
    pub(crate) leader: u64,
    #[serde(rename = "raftTerm", deserialize_with = "int")]
    pub(crate) raft_term: u64,
    #[serde(rename = "raftIndex", deserialize_with = "int")]
    pub(crate) raft_index: u64,
}

/// `mvccpb.Event`; `type` is omitted for `PUT` (enum value 0).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Event {
    #[serde(rename = "type")]
    pub(crate) event_type: String,
}

/// `WatchResponse`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WatchResponse {
    pub(crate) created: bool,
    pub(crate) canceled: bool,
    pub(crate) cancel_reason: String,
    pub(crate) events: Vec<Event>,
}

/// A streamed message: the gateway wraps each one as `{"result": ...}` or `{"error": ...}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Streamed<T> {
    pub(crate) result: Option<T>,
    pub(crate) error: Option<Value>,
}

/// The gateway's error body: `{"error": "...", "code": N, "message": "..."}` (the gRPC
/// code is not used: the message is what tells a refusal from an unknown outcome).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorBody {
    pub(crate) error: String,
    pub(crate) message: String,
}

/// `RangeRequest` for the first (`ascending`) or last key under a prefix by create revision,
/// optionally only among keys created at or before `max_create_revision`.
pub(crate) fn range_first_by_create(
    prefix: &[u8],
    ascending: bool,
    max_create_revision: Option<i64>,
) -> Value {
    let mut request = json!({
        "key": encode(prefix),
        "range_end": encode(&prefix_end(prefix)),
        "sort_target": "CREATE",
        "sort_order": if ascending { "ASCEND" } else { "DESCEND" },
        "limit": "1",
        "keys_only": true,
    });
    if let Some(max) = max_create_revision {
        request["max_create_revision"] = json!(max.to_string());
    }
    request
}

/// `RangeRequest` for one key.
pub(crate) fn range_key(key: &[u8]) -> Value {
    json!({ "key": encode(key), "keys_only": true })
}

/// `RequestOp::request_put` of an empty value attached to `lease`.
pub(crate) fn put_with_lease(key: &[u8], lease: i64) -> Value {
    json!({ "request_put": { "key": encode(key), "value": "", "lease": lease.to_string() } })
}

/// `Compare` of the create revision of every key in `[key, range_end)` (or of `key` alone).
pub(crate) fn compare_create(
    key: &[u8],
    range_end: Option<&[u8]>,
    result: &str,
    revision: i64,
) -> Value {
    let mut compare = json!({
        "target": "CREATE",
        "key": encode(key),
        "result": result,
        "create_revision": revision.to_string(),
    });
    if let Some(end) = range_end {
        compare["range_end"] = json!(encode(end));
    }
    compare
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        // etcd clientv3 GetPrefixRangeEnd: drop trailing 0xff bytes, then add one.
        assert_eq!(prefix_end(b"L/"), b"L0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
    }

    #[test]
    fn gateway_integers_parse_from_strings_and_defaults_fill_omitted_fields() {
        // The gateway writes int64 as strings and omits defaults (jsonpb, EmitDefaults off).
        let body = br#"{"header":{"member_id":"17010963214147749224","revision":"7"},
            "responses":[{"response_range":{"kvs":[{"key":"TC8=","create_revision":"5",
            "lease":"389739724703824649"}]}}]}"#;
        let txn: TxnResponse = serde_json::from_slice(body).unwrap();
        assert!(!txn.succeeded);
        assert_eq!(txn.header.member_id, 17010963214147749224);
        assert_eq!(txn.header.revision, 7);
        let kvs = &txn.responses[0].response_range.as_ref().unwrap().kvs;
        assert_eq!(kvs[0].create_revision, 5);
        assert_eq!(kvs[0].lease, 389739724703824649);
        assert_eq!(decode(&kvs[0].key).unwrap(), b"L/");
    }

    #[test]
    fn a_non_integer_revision_is_an_error_not_a_zero() {
        // STYLE 12: bad input is an error that says why, never a silent default.
        let error = serde_json::from_slice::<Header>(br#"{"revision":"x7"}"#).unwrap_err();
        assert!(
            error.to_string().contains("not a 64-bit integer"),
            "{error}"
        );
    }
}
