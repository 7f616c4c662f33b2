//! The in-memory object store: JSON objects keyed by (resource, namespace, name), a global
//! `resourceVersion` counter, a bounded event history for watch resumption, and owner-reference
//! garbage collection on delete.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value, json};
use tokio::sync::{Notify, broadcast};

use crate::discovery::ResourceInfo;
use crate::selector::Selectors;
use crate::status::{ApiError, Result};
use crate::util;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Deleted.
    Deleted,
}

/// One change, as recorded in the history and broadcast to watches.
#[derive(Debug)]
pub(crate) struct Change {
    /// The `resourceVersion` the change produced.
    pub(crate) rv: u64,
    /// Created, updated or deleted.
    pub(crate) kind: ChangeKind,
    /// The object's resource type.
    pub(crate) resource: &'static ResourceInfo,
    /// The object before the change (`None` for creates).
    pub(crate) old: Option<Value>,
    /// The object after the change (the last state, for deletes).
    pub(crate) object: Value,
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource: `.status` is kept when the type has a status subresource.
    Main,
    /// The `status` subresource: only `.status` changes.
    Status,
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    /// Dependents are deleted (the simulator deletes them at once, like Foreground).
    Background,
    /// Dependents are deleted before the owner (same effect here).
    Foreground,
    /// Owner references to the deleted object are removed from dependents.
    Orphan,
}

type Key = (String, String, String);

struct Inner {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    /// The highest `resourceVersion` dropped from the history.
    compacted: u64,
}

/// The object store. Cheap to share behind an `Arc`.
pub(crate) struct Store {
    inner: Mutex<Inner>,
    history_limit: usize,
    changes: broadcast::Sender<Arc<Change>>,
    changed: Arc<Notify>,
}

/// `DeleteOptions.preconditions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Preconditions {
    /// The object's `metadata.uid` must be this.
    pub(crate) uid: Option<String>,
    /// The object's `metadata.resourceVersion` must be this.
    pub(crate) resource_version: Option<String>,
}

/// What a watch needs to start: the backlog after its `resourceVersion` and a live feed.
pub(crate) struct WatchStart {
    /// Events to replay first (already filtered by resource).
    pub(crate) backlog: Vec<Arc<Change>>,
    /// Live changes after the backlog.
    pub(crate) live: broadcast::Receiver<Arc<Change>>,
    /// The store's `resourceVersion` when the watch started.
    pub(crate) rv: u64,
}

/// One page of a paged LIST (see [`Store::list_page`]).
pub(crate) struct ListPage {
    /// The page's objects.
    pub(crate) items: Vec<Value>,
    /// The list's `resourceVersion` (the first page's).
    pub(crate) rv: u64,
    /// The `continue` token of the next page, when more objects match.
    pub(crate) next: Option<String>,
}

/// The API server's continue token: base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"KEY\0"}`,
/// KEY the last object's key (here `namespace/name`).
fn continue_token(rv: u64, ns: &str, name: &str) -> String {
    let token = serde_json::json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{ns}/{name}\u{0}")});
    crate::util::base64_encode(token.to_string().as_bytes())
}

/// The `resourceVersion` and the last key of a continue token.
fn continue_key(token: &str) -> Option<(u64, (String, String))> {
    let value: Value = serde_json::from_slice(&crate::util::base64_decode(token)?).ok()?;
    if value.get("v")?.as_str()? != "meta.k8s.io/v1" {
        return None;
    }
    let start = value.get("start")?.as_str()?.strip_suffix('\u{0}')?;
    let (ns, name) = start.split_once('/')?;
    Some((value.get("rv")?.as_u64()?, (ns.to_owned(), name.to_owned())))
}

fn key(res: &ResourceInfo, ns: &str, name: &str) -> Key {
    (format!("{}/{}", res.api_version(), res.plural), ns.to_owned(), name.to_owned())
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

impl Store {
    /// An empty store keeping `history_limit` changes for watch resumption.
    pub(crate) fn new(history_limit: usize) -> Self {
        let (changes, _) = broadcast::channel(4096);
        Self {
            inner: Mutex::new(Inner { objects: BTreeMap::new(), rv: 0, history: VecDeque::new(), compacted: 0 }),
            history_limit: history_limit.max(1),
            changes,
            changed: Arc::new(Notify::new()),
        }
    }

    /// Woken after every change (a permit is stored if nobody waits).
    pub(crate) fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every write is one insert),
        // so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The latest `resourceVersion`.
    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    fn commit(
        &self,
        inner: &mut Inner,
        kind: ChangeKind,
        res: &'static ResourceInfo,
        old: Option<Value>,
        mut object: Value,
    ) -> Value {
        inner.rv += 1;
        object["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        let change = Arc::new(Change { rv: inner.rv, kind, resource: res, old, object: object.clone() });
        inner.history.push_back(change.clone());
        while inner.history.len() > self.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted = dropped.rv;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.changes.send(change);
        self.changed.notify_one();
        object
    }

    /// Creates an object (`POST`). Fills in `name` from `generateName`, `uid`,
    /// `resourceVersion`, `creationTimestamp`, `namespace`, `kind` and `apiVersion`.
    pub(crate) fn create(&self, res: &'static ResourceInfo, ns: &str, obj: Value) -> Result<Value> {
        self.create_or_try(res, ns, obj, true)
    }

    /// `create` with `dryRun=All`: every check and default, nothing stored (no
    /// `resourceVersion`, no watch event).
    pub(crate) fn create_dry_run(&self, res: &'static ResourceInfo, ns: &str, obj: Value) -> Result<Value> {
        self.create_or_try(res, ns, obj, false)
    }

    fn create_or_try(&self, res: &'static ResourceInfo, ns: &str, mut obj: Value, store: bool) -> Result<Value> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body of the request must be a JSON object"));
        }
        let ns = if res.namespaced { ns } else { "" };
        if res.namespaced
            && let Some(body_ns) = meta_str(&obj, "namespace")
            && !body_ns.is_empty()
            && body_ns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let mut inner = self.lock();
        let name = match meta_str(&obj, "name").filter(|n| !n.is_empty()) {
            Some(name) => name.to_owned(),
            None => {
                let prefix = meta_str(&obj, "generateName").filter(|p| !p.is_empty()).ok_or_else(|| {
                    ApiError::invalid(
                        res.plural,
                        "",
                        format!(
                            "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                            res.kind
                        ),
                    )
                })?;
                let mut name = format!("{prefix}{}", util::name_suffix());
                while inner.objects.contains_key(&key(res, ns, &name)) {
                    name = format!("{prefix}{}", util::name_suffix());
                }
                name
            }
        };
        if let Some(why) = name_error(res, &name) {
            let kind = if res.group.is_empty() || res.group.ends_with(".k8s.io") {
                res.kind.to_owned()
            } else {
                format!("{}.{}", res.kind, res.group)
            };
            return Err(ApiError::invalid(
                res.plural,
                &name,
                format!("{kind} \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": {why}"),
            ));
        }
        let k = key(res, ns, &name);
        if inner.objects.contains_key(&k) {
            return Err(ApiError::already_exists(&res.qualified(), &name));
        }
        obj["kind"] = json!(res.kind);
        obj["apiVersion"] = json!(res.api_version());
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        if res.namespaced {
            meta["namespace"] = json!(ns);
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("namespace");
        }
        meta["uid"] = json!(util::new_uid());
        meta["creationTimestamp"] = json!(util::now_rfc3339());
        meta["generation"] = json!(1);
        if let Some(m) = meta.as_object_mut() {
            m.remove("resourceVersion");
            m.remove("deletionTimestamp");
        }
        if res.kind == "Secret" {
            fold_string_data(&mut obj);
        }
        if !store {
            return Ok(obj);
        }
        let obj = self.commit(&mut inner, ChangeKind::Added, res, None, obj);
        inner.objects.insert(k.clone(), obj.clone());
        // The garbage collector deletes a new dependent whose owners are all gone: a controller
        // that read its owner from a cache may create it just after the owner's deletion
        // (`pkg/controller/garbagecollector/garbagecollector.go`, `attemptToDeleteItem` with
        // `classifyReferences`: every reference dangling means delete). The real one does it a
        // moment later; here it is at once, which no client can tell apart from a fast GC.
        let owners: Vec<&str> = owner_uids(&obj).collect();
        let dangling = !owners.is_empty()
            && !inner.objects.values().filter_map(|v| meta_str(v, "uid")).any(|u| owners.contains(&u));
        if dangling {
            self.remove_locked(&mut inner, res, k, obj.clone(), Propagation::Background);
        }
        Ok(obj)
    }

    /// Reads one object.
    pub(crate) fn get(&self, res: &'static ResourceInfo, ns: &str, name: &str) -> Result<Value> {
        let ns = if res.namespaced { ns } else { "" };
        self.lock().objects.get(&key(res, ns, name)).cloned().ok_or_else(|| ApiError::not_found(&res.qualified(), name))
    }

    /// Lists objects of one type in one namespace (or all with `None`), with the list's
    /// `resourceVersion`.
    pub(crate) fn list(&self, res: &'static ResourceInfo, ns: Option<&str>, sel: &Selectors) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let prefix = key(res, "", "").0;
        let items = inner
            .objects
            .iter()
            .filter(|((r, n, _), _)| *r == prefix && ns.is_none_or(|ns| !res.namespaced || n == ns))
            .map(|(_, v)| v)
            .filter(|v| sel.matches(v))
            .cloned()
            .collect();
        (items, inner.rv)
    }

    /// Calls `f` with each object of one type in namespace `ns`, without copying them (under
    /// the store's lock: `f` must not call the store).
    pub(crate) fn for_each(&self, res: &'static ResourceInfo, ns: &str, mut f: impl FnMut(&Value)) {
        let inner = self.lock();
        let prefix = key(res, "", "").0;
        let ns = if res.namespaced { ns } else { "" };
        let start = (prefix.clone(), ns.to_owned(), String::new());
        for ((r, n, _), v) in inner.objects.range(start..) {
            if *r != prefix || n != ns {
                break;
            }
            f(v);
        }
    }

    /// One page of a LIST with `limit` (and the `continue` token of the previous page): at most
    /// `limit` matching objects after the token's key, and the token of the next page when more
    /// match. As the API server's etcd3 store (staging/src/k8s.io/apiserver/pkg/storage/etcd3/
    /// store.go `GetList`, continue.go): objects in key order (namespace, name); the token
    /// encodes the first page's `resourceVersion` and the last key returned; a token whose
    /// `resourceVersion` the history no longer holds gets `410 Expired`, as one older than etcd's
    /// compaction does. Divergence: later pages are read from the current objects, not from a
    /// snapshot at the token's `resourceVersion` (etcd serves them at that revision), so an
    /// object created, changed or deleted between pages shows as it is now.
    pub(crate) fn list_page(
        &self,
        res: &'static ResourceInfo,
        ns: Option<&str>,
        sel: &Selectors,
        limit: usize,
        token: Option<&str>,
    ) -> Result<ListPage> {
        let inner = self.lock();
        let prefix = key(res, "", "").0;
        let (rv, after) = match token {
            Some(token) => {
                let (rv, after) = continue_key(token)
                    .ok_or_else(|| ApiError::bad_request(format!("continue key is not valid: {token:?}")))?;
                if rv < inner.compacted {
                    return Err(ApiError::continue_expired());
                }
                (rv, Some(after))
            }
            None => (inner.rv, None),
        };
        let start = match &after {
            Some((n, name)) => std::ops::Bound::Excluded((prefix.clone(), n.clone(), name.clone())),
            None => std::ops::Bound::Included((prefix.clone(), String::new(), String::new())),
        };
        let mut items = Vec::new();
        let mut last = None;
        let mut more = false;
        for ((r, n, name), v) in inner.objects.range((start, std::ops::Bound::Unbounded)) {
            if *r != prefix {
                break;
            }
            if ns.is_some_and(|ns| res.namespaced && n != ns) || !sel.matches(v) {
                continue;
            }
            if items.len() == limit.max(1) {
                more = true;
                break;
            }
            items.push(v.clone());
            last = Some((n.clone(), name.clone()));
        }
        let next = more.then(|| last.map(|(n, name)| continue_token(rv, &n, &name))).flatten();
        Ok(ListPage { items, rv, next })
    }

    /// Replaces an object (`PUT`), failing with 409 when the body's `resourceVersion` is stale.
    pub(crate) fn replace(
        &self,
        res: &'static ResourceInfo,
        ns: &str,
        name: &str,
        body: Value,
        part: Part,
    ) -> Result<Value> {
        if meta_str(&body, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request("the name of the object does not match the name on the URL"));
        }
        let wanted_rv = meta_str(&body, "resourceVersion").filter(|s| !s.is_empty()).map(str::to_owned);
        self.write(res, ns, name, wanted_rv.as_deref(), part, |_| body)
    }

    /// Applies a JSON merge patch (RFC 7386) to an object.
    pub(crate) fn patch(
        &self,
        res: &'static ResourceInfo,
        ns: &str,
        name: &str,
        patch: &Value,
        part: Part,
    ) -> Result<Value> {
        let wanted_rv = meta_str(patch, "resourceVersion").map(str::to_owned);
        self.write(res, ns, name, wanted_rv.as_deref(), part, |current| {
            let mut next = current.clone();
            merge_patch(&mut next, patch);
            next
        })
    }

    /// Internal update by the controller or runtime: `f` edits the whole object, status included.
    /// Nothing is written (and no `resourceVersion` is spent) when `f` changes nothing.
    pub(crate) fn update(
        &self,
        res: &'static ResourceInfo,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Value> {
        let ns = if res.namespaced { ns } else { "" };
        let mut inner = self.lock();
        let k = key(res, ns, name);
        let current = inner.objects.get(&k).ok_or_else(|| ApiError::not_found(&res.qualified(), name))?;
        let mut next = current.clone();
        f(&mut next);
        if next == *current {
            return Ok(next);
        }
        let old = current.clone();
        if next["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&next) {
            inner.objects.remove(&k);
            return Ok(self.commit(&mut inner, ChangeKind::Deleted, res, Some(old), next));
        }
        let next = self.commit(&mut inner, ChangeKind::Modified, res, Some(old), next);
        inner.objects.insert(k, next.clone());
        Ok(next)
    }

    fn write(
        &self,
        res: &'static ResourceInfo,
        ns: &str,
        name: &str,
        wanted_rv: Option<&str>,
        part: Part,
        build: impl FnOnce(&Value) -> Value,
    ) -> Result<Value> {
        let ns = if res.namespaced { ns } else { "" };
        let mut inner = self.lock();
        let k = key(res, ns, name);
        let current = inner.objects.get(&k).ok_or_else(|| ApiError::not_found(&res.qualified(), name))?.clone();
        if let Some(rv) = wanted_rv
            && meta_str(&current, "resourceVersion") != Some(rv)
        {
            return Err(ApiError::conflict(&res.qualified(), name));
        }
        let proposed = build(&current);
        if !proposed.is_object() {
            return Err(ApiError::bad_request("the body of the request must be a JSON object"));
        }
        let mut next = match part {
            Part::Status => {
                let mut next = current.clone();
                next["status"] = proposed.get("status").cloned().unwrap_or(Value::Null);
                next
            }
            Part::Main => {
                let mut next = proposed;
                if res.has_status() {
                    match current.get("status") {
                        Some(status) => next["status"] = status.clone(),
                        None => {
                            if let Some(m) = next.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                if !next.get("metadata").is_some_and(Value::is_object) {
                    next["metadata"] = json!({});
                }
                // Identity fields are immutable.
                for field in ["name", "namespace", "uid", "creationTimestamp", "generation"] {
                    match current["metadata"].get(field) {
                        Some(v) => next["metadata"][field] = v.clone(),
                        None => {
                            if let Some(m) = next["metadata"].as_object_mut() {
                                m.remove(field);
                            }
                        }
                    }
                }
                if next.get("spec") != current.get("spec") {
                    let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
                    next["metadata"]["generation"] = json!(generation + 1);
                }
                if res.kind == "Secret" {
                    fold_string_data(&mut next);
                }
                next
            }
        };
        next["kind"] = json!(res.kind);
        next["apiVersion"] = json!(res.api_version());
        if next == current {
            return Ok(current);
        }
        if next["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&next) {
            inner.objects.remove(&k);
            return Ok(self.commit(&mut inner, ChangeKind::Deleted, res, Some(current), next));
        }
        let next = self.commit(&mut inner, ChangeKind::Modified, res, Some(current), next);
        inner.objects.insert(k, next.clone());
        Ok(next)
    }

    /// Deletes an object and, unless orphaning, every object that (transitively) names it in
    /// `ownerReferences`. Returns the deleted object.
    pub(crate) fn delete(
        &self,
        res: &'static ResourceInfo,
        ns: &str,
        name: &str,
        propagation: Propagation,
    ) -> Result<Value> {
        self.delete_if(res, ns, name, propagation, &Preconditions::default())
    }

    /// [`Store::delete`] with `DeleteOptions.preconditions`: 409 Conflict when the object's
    /// `uid` or `resourceVersion` differs (checked under the same lock as the delete, as the
    /// apiserver checks them inside etcd's guaranteed update: `staging/src/k8s.io/apiserver/
    /// pkg/registry/generic/registry/store.go`, `Store.Delete` and `checkPreconditions`).
    pub(crate) fn delete_if(
        &self,
        res: &'static ResourceInfo,
        ns: &str,
        name: &str,
        propagation: Propagation,
        pre: &Preconditions,
    ) -> Result<Value> {
        let ns = if res.namespaced { ns } else { "" };
        let mut inner = self.lock();
        let k = key(res, ns, name);
        let obj = inner.objects.get(&k).cloned().ok_or_else(|| ApiError::not_found(&res.qualified(), name))?;
        for (field, wanted) in [("uid", &pre.uid), ("resourceVersion", &pre.resource_version)] {
            if let Some(wanted) = wanted
                && meta_str(&obj, field) != Some(wanted.as_str())
            {
                return Err(ApiError::conflict(&res.qualified(), name));
            }
        }
        if has_finalizers(&obj) {
            // Like the apiserver: an object with finalizers is only marked; whoever owns the
            // finalizer (the pod runtime) removes it once its work is done, and then it goes.
            if obj["metadata"].get("deletionTimestamp").is_some() {
                return Ok(obj);
            }
            let mut marked = obj.clone();
            marked["metadata"]["deletionTimestamp"] = json!(util::now_rfc3339());
            let marked = self.commit(&mut inner, ChangeKind::Modified, res, Some(obj), marked);
            inner.objects.insert(k, marked.clone());
            return Ok(marked);
        }
        Ok(self.remove_locked(&mut inner, res, k, obj, propagation))
    }

    /// Removes an object without finalizers and cascades to its dependents (the lock held).
    fn remove_locked(
        &self,
        inner: &mut Inner,
        res: &'static ResourceInfo,
        k: Key,
        obj: Value,
        propagation: Propagation,
    ) -> Value {
        inner.objects.remove(&k);
        let mut deleted = obj.clone();
        deleted["metadata"]["deletionTimestamp"] = json!(util::now_rfc3339());
        let deleted = self.commit(inner, ChangeKind::Deleted, res, Some(obj.clone()), deleted);
        let mut owners: Vec<String> = meta_str(&obj, "uid").map(str::to_owned).into_iter().collect();
        let mut seen: HashSet<String> = owners.iter().cloned().collect();
        while let Some(owner_uid) = owners.pop() {
            let dependents: Vec<Key> = inner
                .objects
                .iter()
                .filter(|(_, v)| owner_uids(v).any(|u| u == owner_uid))
                .map(|(k, _)| k.clone())
                .collect();
            for dep_key in dependents {
                let Some(dep) = inner.objects.get(&dep_key).cloned() else { continue };
                let Some(dep_res) = crate::discovery::find_kind(
                    dep["apiVersion"].as_str().unwrap_or(""),
                    dep["kind"].as_str().unwrap_or(""),
                ) else {
                    continue;
                };
                if propagation == Propagation::Orphan {
                    let mut next = dep.clone();
                    if let Some(refs) = next["metadata"]["ownerReferences"].as_array_mut() {
                        refs.retain(|r| r["uid"].as_str() != Some(owner_uid.as_str()));
                    }
                    let next = self.commit(inner, ChangeKind::Modified, dep_res, Some(dep), next);
                    inner.objects.insert(dep_key, next);
                } else if has_finalizers(&dep) {
                    if dep["metadata"].get("deletionTimestamp").is_none() {
                        let mut marked = dep.clone();
                        marked["metadata"]["deletionTimestamp"] = json!(util::now_rfc3339());
                        let marked = self.commit(inner, ChangeKind::Modified, dep_res, Some(dep), marked);
                        inner.objects.insert(dep_key, marked);
                    }
                } else {
                    inner.objects.remove(&dep_key);
                    if let Some(uid) = meta_str(&dep, "uid")
                        && seen.insert(uid.to_owned())
                    {
                        owners.push(uid.to_owned());
                    }
                    let mut gone = dep.clone();
                    gone["metadata"]["deletionTimestamp"] = json!(util::now_rfc3339());
                    self.commit(inner, ChangeKind::Deleted, dep_res, Some(dep), gone);
                }
            }
        }
        deleted
    }

    /// Starts a watch of one resource type from `from_rv` (`None` or 0: the current state is
    /// replayed as ADDED events). Fails with 410 when `from_rv` was compacted away.
    pub(crate) fn watch(&self, res: &'static ResourceInfo, from_rv: Option<u64>) -> Result<WatchStart> {
        let inner = self.lock();
        let live = self.changes.subscribe();
        let backlog = match from_rv {
            None | Some(0) => {
                let prefix = key(res, "", "").0;
                inner
                    .objects
                    .iter()
                    .filter(|((r, _, _), _)| *r == prefix)
                    .map(|(_, v)| {
                        let rv = meta_str(v, "resourceVersion").and_then(|s| s.parse().ok()).unwrap_or(0);
                        Arc::new(Change { rv, kind: ChangeKind::Added, resource: res, old: None, object: v.clone() })
                    })
                    .collect()
            }
            Some(rv) => {
                if rv < inner.compacted {
                    return Err(ApiError::gone(rv, inner.compacted + 1));
                }
                inner.history.iter().filter(|c| c.rv > rv && std::ptr::eq(c.resource, res)).cloned().collect()
            }
        };
        Ok(WatchStart { backlog, live, rv: inner.rv })
    }
}

fn owner_uids(obj: &Value) -> impl Iterator<Item = &str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}

/// RFC 7386 JSON merge patch. Strategic merge patches are applied with it too (lists are
/// replaced rather than merged by key, a documented divergence).
/// Whether an object still has finalizers (its deletion waits for them).
fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty())
}

pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target_map) = target {
        for (k, v) in patch_map {
            if v.is_null() {
                target_map.remove(k);
            } else {
                merge_patch(target_map.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Moves Secret `stringData` into base64 `data`, as the apiserver does on write.
fn fold_string_data(obj: &mut Value) {
    let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (k, v) in string_data {
        let text = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
        obj["data"][k] = json!(util::base64_encode(text.as_bytes()));
    }
}

/// What is wrong with `name` for `res`, as `apimachinery/pkg/util/validation` words it: Services
/// are DNS-1035 labels (`ValidateServiceName`), Namespaces DNS-1123 labels
/// (`ValidateNamespaceName`), everything else DNS-1123 subdomains (`NameIsDNSSubdomain`).
fn name_error(res: &ResourceInfo, name: &str) -> Option<String> {
    let label_chars = |s: &str| s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let alnum_end = |s: &str| s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit());
    match res.kind {
        "Service" => {
            let ok = label_chars(name) && name.starts_with(|c: char| c.is_ascii_lowercase()) && alnum_end(name);
            if name.len() > 63 {
                Some("must be no more than 63 characters".into())
            } else if !ok {
                Some(
                    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic \
                     character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for \
                     validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
                        .into(),
                )
            } else {
                None
            }
        }
        "Namespace" => {
            let ok = label_chars(name) && name.starts_with(|c: char| c.is_ascii_alphanumeric()) && alnum_end(name);
            if name.len() > 63 {
                Some("must be no more than 63 characters".into())
            } else if !ok {
                Some(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start \
                     and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is \
                     '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                        .into(),
                )
            } else {
                None
            }
        }
        _ => {
            let ok = name.split('.').all(|part| {
                !part.is_empty()
                    && label_chars(part)
                    && part.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && alnum_end(part)
            });
            if name.len() > 253 {
                Some("must be no more than 253 characters".into())
            } else if !ok {
                Some(
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and \
                     must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is \
                     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                        .into(),
                )
            } else {
                None
            }
        }
    }
}
