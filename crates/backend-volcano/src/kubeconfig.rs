//! Reading kubeconfig files as kubectl reads them: one bounded regular file, never quoted in an
//! error (it holds tokens and keys); relative file references resolved against the file's dir;
//! the files of `KUBECONFIG` merged in order, a missing one skipped; the chosen context with its
//! namespace and its cluster's `proxy-url`.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use theseus_core::config::load::yaml_message;
use theseus_core::files::KUBECONFIG_LIMIT;

use crate::error::{VolcanoError, config_error};

/// The namespace `context` of `kubeconfig` sets, if any.
pub(crate) fn context_namespace(kubeconfig: &Kubeconfig, context: &str) -> Option<String> {
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.namespace.clone())
        .filter(|n| !n.is_empty())
}

/// The files of `KUBECONFIG` merged in order, as kubectl merges them: a file that does not
/// exist is skipped; none existing is an error naming them all.
pub(crate) fn merged(paths: &[PathBuf], context: Option<&str>, described: &str) -> Result<Kubeconfig, VolcanoError> {
    let present: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
    if present.is_empty() {
        return Err(config_error(
            described,
            context.map(str::to_owned),
            "none of the KUBECONFIG files exists",
            "check KUBECONFIG, or set `kubeconfig` on the host",
        ));
    }
    for gone in paths.iter().filter(|p| !p.exists()) {
        tracing::debug!(file = %gone.display(), "KUBECONFIG names a file that does not exist; skipped, as kubectl does");
    }
    let mut merged = Kubeconfig::default();
    for path in present {
        let next = read(path, context)?;
        merged = merged.merge(next).map_err(|e| {
            config_error(
                described,
                context.map(str::to_owned),
                &e.to_string(),
                "make the files in KUBECONFIG agree on kind and apiVersion",
            )
        })?;
    }
    Ok(merged)
}

/// Reads one kubeconfig file: a regular file of at most [`KUBECONFIG_LIMIT`] bytes, parsed
/// without ever quoting its text in an error (it holds tokens and keys), with relative file
/// references resolved against the file's dir as kubectl does.
pub(crate) fn read(path: &Path, context: Option<&str>) -> Result<Kubeconfig, VolcanoError> {
    let shown = path.display().to_string();
    let fail = |problem: &str, fix: &str| config_error(&shown, context.map(str::to_owned), problem, fix);
    if !path.exists() {
        return Err(fail("no such file", "check the path, or set `kubeconfig` on the host"));
    }
    let text = theseus_core::files::read_bounded(path, KUBECONFIG_LIMIT, "kubeconfig").map_err(|e| {
        let message = e.to_string();
        let problem = message.strip_prefix(&format!("kubeconfig {shown}: ")).unwrap_or(&message);
        fail(problem, "give the path of a kubeconfig file")
    })?;
    let mut kubeconfig = Kubeconfig::from_yaml(&text).map_err(|e| match e {
        KubeconfigError::Parse(inner) => {
            fail(&format!("invalid YAML: {}", yaml_message(&inner.to_string())), "fix the file's YAML")
        }
        other => fail(&yaml_message(&other.to_string()), "fix the file's YAML"),
    })?;
    if let Some(dir) = path.parent() {
        resolve_relative_paths(&mut kubeconfig, dir);
    }
    Ok(kubeconfig)
}

/// Makes the file references of a kubeconfig (certificate authority, client certificate and
/// key, token file, and an exec plugin command that is a path) absolute against `dir`, the
/// kubeconfig's own dir: the rule of client-go (`ResolveLocalPaths` in
/// `tools/clientcmd/loader.go`); bare exec commands stay `PATH` lookups.
fn resolve_relative_paths(kubeconfig: &mut Kubeconfig, dir: &Path) {
    let absolute = |file: &mut Option<String>| {
        if let Some(f) = file.as_mut()
            && !f.is_empty()
            && Path::new(f.as_str()).is_relative()
            && let Some(joined) = dir.join(f.as_str()).to_str()
        {
            *f = joined.to_owned();
        }
    };
    for cluster in kubeconfig.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        absolute(&mut cluster.certificate_authority);
    }
    for user in kubeconfig.auth_infos.iter_mut().filter_map(|u| u.auth_info.as_mut()) {
        absolute(&mut user.client_certificate);
        absolute(&mut user.client_key);
        absolute(&mut user.token_file);
        if let Some(exec) = user.exec.as_mut()
            && exec.command.as_deref().is_some_and(|c| c.contains('/'))
        {
            absolute(&mut exec.command);
        }
    }
}

/// A kube config from the chosen context of `kubeconfig`, with that context's namespace and
/// its cluster's `proxy-url`.
pub(crate) type Loaded = (kube::Config, Option<String>, Option<String>, Option<String>);

pub(crate) async fn from_kubeconfig(
    kubeconfig: Kubeconfig,
    described: &str,
    context: Option<&str>,
) -> Result<Loaded, VolcanoError> {
    let available: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let list = if available.is_empty() { "none".to_owned() } else { available.join(", ") };
    let chosen = match context {
        Some(c) if !available.iter().any(|a| a == c) => {
            return Err(config_error(
                described,
                Some(c.to_owned()),
                "no such context",
                &format!("set the host's `context` to one of: {list}"),
            ));
        }
        Some(c) => c.to_owned(),
        None => match kubeconfig.current_context.clone().filter(|c| !c.is_empty()) {
            Some(c) => c,
            None => {
                return Err(config_error(
                    described,
                    None,
                    "no current-context",
                    &format!("set the host's `context` to one of: {list}"),
                ));
            }
        },
    };
    let namespace = context_namespace(&kubeconfig, &chosen);
    let cluster_name = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == chosen)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let proxy_url = kubeconfig
        .clusters
        .iter()
        .find(|c| Some(&c.name) == cluster_name.as_ref())
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.proxy_url.clone());
    let options = KubeConfigOptions { context: Some(chosen.clone()), cluster: None, user: None };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(|e| {
        config_error(
            described,
            Some(chosen.clone()),
            &e.to_string(),
            "fix the context's cluster and user entries (`kubectl config view`)",
        )
    })?;
    Ok((config, Some(chosen), namespace, proxy_url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_file_references_resolve_against_the_kubeconfig_dir() {
        let mut kubeconfig = Kubeconfig::from_yaml(
            "clusters:\n- name: c\n  cluster: {server: 'https://x', certificate-authority: ca.crt}\nusers:\n- name: u\n  \
             user: {client-certificate: /abs/c.crt, client-key: keys/k.pem, exec: {command: aws, apiVersion: v1}}\n- name: v\n  \
             user: {exec: {command: ./bin/auth, apiVersion: v1}}\n",
        )
        .unwrap();
        resolve_relative_paths(&mut kubeconfig, Path::new("/home/u/.kube"));
        let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority.as_deref(), Some("/home/u/.kube/ca.crt"));
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate.as_deref(), Some("/abs/c.crt"));
        assert_eq!(user.client_key.as_deref(), Some("/home/u/.kube/keys/k.pem"));
        assert_eq!(user.exec.as_ref().unwrap().command.as_deref(), Some("aws"));
        let user = kubeconfig.auth_infos[1].auth_info.as_ref().unwrap();
        assert_eq!(user.exec.as_ref().unwrap().command.as_deref(), Some("/home/u/.kube/./bin/auth"));
    }
}
