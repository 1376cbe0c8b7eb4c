//! Which congestion-control algorithms this kernel has, and how: built in, a loaded module, or
//! a module that can be loaded. Read from the kernel (its list, /sys/module, its config and
//! module index), never from lsmod, where built-in algorithms never appear.

use std::{path::Path, process::Command};

use anyhow::{Result, bail};
use serde::Serialize;

use crate::{
    error::usage,
    sys::{cc, kconfig},
};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Provision {
    BuiltIn,
    /// A module, loaded now.
    Loaded {
        module: String,
    },
    /// A module that is installed but not loaded.
    Loadable {
        module: String,
    },
}

impl Provision {
    pub(crate) fn module(&self) -> Option<&str> {
        match self {
            Provision::BuiltIn => None,
            Provision::Loaded { module } | Provision::Loadable { module } => Some(module),
        }
    }
}

/// The kernel module that provides algorithm `name` (the kernel asks for "tcp_<name>" itself
/// when an unknown algorithm is requested).
pub(crate) fn module_name(name: &str) -> String {
    format!("tcp_{name}")
}

/// What the running kernel offers.
#[derive(Clone, Debug, Default)]
pub struct Kernel {
    /// Registered now (`tcp_available_congestion_control`).
    pub(crate) registered: Vec<String>,
    /// `CONFIG_*=y|m` lines from the kernel's configuration, when it publishes it.
    config: Option<String>,
    /// modules.dep of the running kernel, when installed.
    modules_dep: Option<String>,
}

impl Kernel {
    pub fn discover() -> Result<Self> {
        let release = kconfig::release();
        Ok(Kernel {
            registered: cc::available()?,
            config: kconfig::read(&release).map(|(text, _)| text),
            modules_dep: std::fs::read_to_string(format!("/lib/modules/{release}/modules.dep")).ok(),
        })
    }

    #[cfg(test)]
    pub(crate) fn from_parts(registered: &[&str], config: Option<&str>, modules_dep: Option<&str>) -> Self {
        Kernel {
            registered: registered.iter().map(std::string::ToString::to_string).collect(),
            config: config.map(str::to_string),
            modules_dep: modules_dep.map(str::to_string),
        }
    }

    fn module_installed(&self, module: &str) -> bool {
        self.modules_dep.as_deref().is_some_and(|dep| {
            dep.lines().filter_map(|l| l.split(':').next()).any(|path| {
                let file = path.rsplit('/').next().unwrap_or(path);
                file.split(".ko").next() == Some(module)
            })
        })
    }

    /// `y`, `m` or None for a kernel config option.
    pub(crate) fn config(&self, option: &str) -> Option<char> {
        let prefix = format!("{option}=");
        self.config.as_deref()?.lines().find_map(|l| l.strip_prefix(&prefix)?.chars().next())
    }

    /// How `name` is provided, or None when this kernel cannot run it at all.
    pub(crate) fn provision(&self, name: &str) -> Option<Provision> {
        let module = module_name(name);
        if self.registered.iter().any(|a| a == name) {
            // Loaded modules have an initstate; built-in code never does.
            let loaded = Path::new("/sys/module").join(&module).join("initstate").exists();
            return Some(if loaded { Provision::Loaded { module } } else { Provision::BuiltIn });
        }
        let config_says_module = self.config(&format!("CONFIG_TCP_CONG_{}", name.to_ascii_uppercase())) == Some('m');
        (config_says_module || self.module_installed(&module)).then_some(Provision::Loadable { module })
    }

    /// Everything that could be used: registered now, or installed as a module.
    pub(crate) fn usable(&self) -> Vec<String> {
        let mut all = self.registered.clone();
        if let Some(dep) = &self.modules_dep {
            for path in dep.lines().filter_map(|l| l.split(':').next()) {
                let file = path.rsplit('/').next().unwrap_or(path);
                if path.contains("/net/ipv4/")
                    && let Some(name) = file.split(".ko").next().and_then(|m| m.strip_prefix("tcp_"))
                    && !all.iter().any(|a| a == name)
                    && !NOT_ALGORITHMS.contains(&name)
                {
                    all.push(name.to_string());
                }
            }
        }
        all
    }

    /// The algorithm, checked: an unknown name is a usage error listing what there is.
    pub(crate) fn require(&self, name: &str) -> Result<Provision> {
        match self.provision(name) {
            Some(p) => Ok(p),
            None => usage!(
                "unknown congestion control '{name}': this kernel has {} (from the kernel's own list, not lsmod)",
                self.usable().join(", ")
            ),
        }
    }

    /// The default algorithm compiled into the kernel (what a boot with no sysctl file gives).
    pub(crate) fn builtin_default(&self) -> Option<String> {
        let prefix = "CONFIG_DEFAULT_TCP_CONG=";
        let line = self.config.as_deref()?.lines().find_map(|l| l.strip_prefix(prefix))?;
        Some(line.trim_matches('"').to_string())
    }

    /// Whether the fq qdisc exists (built in or as a module): None when the kernel does not say.
    pub(crate) fn has_fq(&self) -> Option<bool> {
        match self.config("CONFIG_NET_SCH_FQ") {
            Some(_) => Some(true),
            None if self.module_installed("sch_fq") => Some(true),
            None if self.config.is_some() => Some(false),
            None => None,
        }
    }
}

/// Qdiscs every kernel has, with no config option of their own (sch_generic.c, sch_fifo.c).
const BUILTIN_QDISCS: &[&str] = &["pfifo_fast", "pfifo", "bfifo", "pfifo_head_drop", "noqueue"];

/// Schedulers that exist but cannot be a device's default root qdisc: ingress hooks, and
/// multi-queue roots that hold the default per queue themselves. `CONFIG_NET_SCH_*` options
/// that are no qdisc at all come first.
const NOT_DEFAULT_QDISCS: &[&str] =
    &["default", "fifo", "mqprio_lib", "ingress", "clsact", "mq", "mqprio", "taprio", "teql", "bpf"];

impl Kernel {
    /// Whether the kernel can create qdisc `name` (built in or as a module): None when the kernel
    /// publishes neither its configuration nor a module index.
    pub fn has_qdisc(&self, name: &str) -> Option<bool> {
        if BUILTIN_QDISCS.contains(&name) {
            return Some(true);
        }
        match self.config(&format!("CONFIG_NET_SCH_{}", name.to_ascii_uppercase())) {
            Some(_) => Some(true),
            None if self.module_installed(&format!("sch_{name}")) => Some(true),
            None if self.config.is_some() || self.modules_dep.is_some() => Some(false),
            None => None,
        }
    }

    /// The qdiscs this kernel can make a device's default, as far as it says.
    pub(crate) fn default_qdiscs(&self) -> Vec<String> {
        let mut all: Vec<String> = BUILTIN_QDISCS.iter().map(std::string::ToString::to_string).collect();
        let from_config = self.config.as_deref().into_iter().flat_map(|c| c.lines()).filter_map(|l| {
            let (opt, v) = l.strip_prefix("CONFIG_NET_SCH_")?.split_once('=')?;
            matches!(v, "y" | "m").then(|| opt.to_ascii_lowercase())
        });
        let from_modules = self.modules_dep.as_deref().into_iter().flat_map(|d| d.lines()).filter_map(|l| {
            let path = l.split(':').next()?;
            let file = path.rsplit('/').next()?;
            Some(file.split(".ko").next()?.strip_prefix("sch_")?.to_string())
        });
        for q in from_config.chain(from_modules) {
            if !all.contains(&q) && !NOT_DEFAULT_QDISCS.contains(&q.as_str()) {
                all.push(q);
            }
        }
        all
    }

    /// `--qdisc NAME`, checked before anything is planned: a name the kernel cannot create would
    /// otherwise be written live and into the boot configuration. A kernel without fq passes:
    /// the plan then skips the qdisc step, as BBR paces by itself.
    pub(crate) fn require_qdisc(&self, name: &str) -> Result<()> {
        let valid = !name.is_empty()
            && name.len() < 16
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            usage!("{name:?} is not a qdisc name (e.g. fq, fq_codel, pfifo_fast)");
        }
        if NOT_DEFAULT_QDISCS.contains(&name) {
            usage!(
                "{name} cannot be a default qdisc (it is not a single-queue root qdisc): use one of {}",
                self.default_qdiscs().join(", ")
            );
        }
        if self.has_qdisc(name) == Some(false) && name != "fq" {
            usage!(
                "this kernel cannot create qdisc '{name}' (not built in, no module): it has {} (from its \
                 configuration and module index)",
                self.default_qdiscs().join(", ")
            );
        }
        Ok(())
    }
}

/// Modules under net/ipv4 named tcp_* that are not congestion control.
const NOT_ALGORITHMS: &[&str] = &["diag", "probe"];

/// Loads a module with modprobe.
pub(crate) fn load_module(module: &str) -> Result<()> {
    let out = match Command::new("modprobe").arg(module).output() {
        Ok(out) => out,
        Err(e) => bail!("running modprobe {module}: {e} (is kmod installed?)"),
    };
    if !out.status.success() {
        bail!("modprobe {module} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "kernel/net/ipv4/tcp_bbr.ko.zst:\nkernel/net/ipv4/tcp_diag.ko.zst: kernel/net/ipv4/inet_diag.ko.zst\nkernel/net/sched/sch_fq.ko.zst:\n";

    #[test]
    fn registered_algorithms_are_usable_and_modules_are_loadable() {
        let k = Kernel::from_parts(&["reno", "cubic"], None, Some(DEP));
        assert_eq!(k.provision("bbr"), Some(Provision::Loadable { module: "tcp_bbr".into() }));
        assert_eq!(k.provision("vegas"), None);
        assert_eq!(k.usable(), ["reno", "cubic", "bbr"], "tcp_diag is not an algorithm");
        assert_eq!(k.has_fq(), Some(true));
    }

    #[test]
    fn kernel_config_decides_without_a_module_index() {
        let cfg = "CONFIG_TCP_CONG_BBR=y\nCONFIG_TCP_CONG_HTCP=m\n# CONFIG_NET_SCH_FQ is not set\nCONFIG_DEFAULT_TCP_CONG=\"bbr\"\n";
        let k = Kernel::from_parts(&["reno", "bbr"], Some(cfg), None);
        assert_eq!(k.provision("htcp"), Some(Provision::Loadable { module: "tcp_htcp".into() }));
        assert_eq!(k.provision("cubic"), None);
        assert_eq!(k.has_fq(), Some(false));
        assert_eq!(k.builtin_default().as_deref(), Some("bbr"));
        assert_eq!(Kernel::from_parts(&[], None, None).has_fq(), None);
    }

    #[test]
    fn qdiscs_come_from_the_config_and_the_module_index() {
        let cfg = "CONFIG_NET_SCH_HTB=y\nCONFIG_NET_SCH_FQ_CODEL=m\n# CONFIG_NET_SCH_FQ is not set\nCONFIG_NET_SCH_INGRESS=y\nCONFIG_NET_SCH_FIFO=y\n";
        let k = Kernel::from_parts(&[], Some(cfg), Some(DEP));
        assert_eq!(k.has_qdisc("fq_codel"), Some(true));
        assert_eq!(k.has_qdisc("fq"), Some(true), "sch_fq.ko is installed");
        assert_eq!(k.has_qdisc("cake"), Some(false));
        assert_eq!(k.has_qdisc("pfifo_fast"), Some(true));
        assert_eq!(Kernel::from_parts(&[], None, None).has_qdisc("cake"), None);
        assert_eq!(
            k.default_qdiscs(),
            ["pfifo_fast", "pfifo", "bfifo", "pfifo_head_drop", "noqueue", "htb", "fq_codel", "fq"]
        );

        let usage = |k: &Kernel, q: &str| {
            k.require_qdisc(q)
                .unwrap_err()
                .downcast_ref::<crate::error::UsageError>()
                .map(std::string::ToString::to_string)
        };
        assert!(usage(&k, "nosuchqdisc").unwrap().contains("fq_codel"), "names what would be right");
        assert!(usage(&k, "ingress").unwrap().contains("cannot be a default"));
        assert!(usage(&k, "fq\nnet.ipv4.ip_forward = 1").unwrap().contains("not a qdisc name"));
        k.require_qdisc("fq_codel").unwrap();
        let no_fq = Kernel::from_parts(&[], Some(cfg), None);
        no_fq.require_qdisc("fq").expect("without fq the plan skips the qdisc step");
        assert!(usage(&no_fq, "fq_pie").is_some());
    }

    #[test]
    fn unknown_algorithm_is_a_usage_error_naming_the_known_ones() {
        let k = Kernel::from_parts(&["reno", "cubic", "bbr"], None, None);
        let e = k.require("bbr9").unwrap_err();
        assert!(e.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(e.to_string().contains("reno, cubic, bbr"), "{e}");
    }
}
