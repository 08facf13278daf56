//! The REST API as the command line uses it: requests with the token, and errors that say
//! what to do.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

/// Where the REST API is and how to talk to it.
pub struct RestClient {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl RestClient {
    /// A client of the endpoint at `base`, sending `token`, trusting `ca_cert` (PEM) for
    /// HTTPS besides the system's roots.
    pub fn new(
        base: &str,
        token: Option<String>,
        ca_cert: Option<&std::path::Path>,
    ) -> Result<Self> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)));
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path).with_context(|| {
                format!(
                    "cannot read the CA certificate `{}` (--ca-cert)",
                    path.display()
                )
            })?;
            let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                bail!("`{}` (--ca-cert) holds no PEM certificate", path.display());
            }
            config = config.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
                    .build(),
            );
        }
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent: config.build().into(),
        })
    }

    fn explain(&self, status: u16, body: &str, what: &str) -> anyhow::Error {
        let detail = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| {
                v["errors"].as_array().map(|e| {
                    e.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("; ")
                })
            })
            .unwrap_or_else(|| body.trim().to_string());
        match status {
            401 if self.token.is_none() => anyhow!(
                "{what}: the REST API at {} requires a token; pass --token or set WEIR_REST_TOKEN",
                self.base
            ),
            401 => anyhow!(
                "{what}: the REST API at {} refused the token given (--token / WEIR_REST_TOKEN)",
                self.base
            ),
            _ => anyhow!("{what}: {detail} (HTTP {status})"),
        }
    }

    fn send(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = match method {
            "GET" => {
                let mut r = self.agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            "PATCH" => {
                let mut r = self.agent.patch(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send_empty()
            }
            _ => {
                let mut r = self.agent.post(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                match body {
                    Some(body) => r.send_json(body),
                    None => r.send_empty(),
                }
            }
        };
        let mut response = result.map_err(|e| {
            anyhow!(
                "cannot reach the Weir REST API at {}: {e}; is the JobManager running? Point --url (or WEIR_REST_URL) at its REST endpoint",
                self.base
            )
        })?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        Ok((status, text))
    }

    /// `GET path` as JSON.
    pub fn get(&self, path: &str, what: &str) -> Result<Value> {
        let (status, body) = self.send("GET", path, None)?;
        if status != 200 {
            return Err(self.explain(status, &body, what));
        }
        serde_json::from_str(&body).with_context(|| format!("{what}: the answer is not JSON"))
    }

    /// `POST path` with `body`, answered 202 with JSON.
    pub fn post(&self, path: &str, body: Option<Value>, what: &str) -> Result<Value> {
        let (status, text) = self.send("POST", path, body)?;
        if status != 202 && status != 200 {
            return Err(self.explain(status, &text, what));
        }
        serde_json::from_str(&text).with_context(|| format!("{what}: the answer is not JSON"))
    }

    /// `PATCH path`, answered 202.
    pub fn patch(&self, path: &str, what: &str) -> Result<()> {
        let (status, text) = self.send("PATCH", path, None)?;
        if status != 202 {
            return Err(self.explain(status, &text, what));
        }
        Ok(())
    }

    /// The id of the job `job` names: an id, a unique prefix of one, or a job's name.
    pub fn resolve_job(&self, job: &str) -> Result<String> {
        let jobs = self.get("/jobs/overview", "listing the jobs")?;
        let jobs = jobs["jobs"].as_array().cloned().unwrap_or_default();
        let field = |j: &Value, k: &str| j[k].as_str().unwrap_or_default().to_string();
        let exact: Vec<String> = jobs
            .iter()
            .filter(|j| field(j, "jid") == job || field(j, "name") == job)
            .map(|j| field(j, "jid"))
            .collect();
        let matches = if exact.is_empty() {
            jobs.iter()
                .filter(|j| field(j, "jid").starts_with(job))
                .map(|j| field(j, "jid"))
                .collect()
        } else {
            exact
        };
        match matches.as_slice() {
            [one] => Ok(one.clone()),
            [] => bail!(
                "no job `{job}` at {}; `weir list` shows the jobs",
                self.base
            ),
            many => bail!(
                "`{job}` names {} jobs ({}); give more of the id",
                many.len(),
                many.join(", ")
            ),
        }
    }
}
