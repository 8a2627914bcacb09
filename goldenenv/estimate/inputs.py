"""The estimate's inputs: flags, a --spec file or a stack's `goldenenv:run.estimate`, checked into a Request.

One set of rules for all three: a spec file is read with every value as the text written (goldenenv.estimate.
specfile), as a flag's value arrives, and request_from parses each value the same way whatever its source: a
number from 13e9, 13000000000 or 1.3e10, a boolean from true/false, yes/no or on/off, a list from a YAML list or
"a,b". So `params: 13e9` reads as `--params 13e9` does, and `offload: no` as false.

Every problem is one line naming the flag (`--params`) or the spec key (`run.yaml: offload`) and saying what would
be valid: a non-finite or out-of-range number, a word that is not a boolean, an unknown name.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path

from goldenenv import catalog
from goldenenv.estimate import footprint as mem
from goldenenv.estimate import lora, shapes
from goldenenv.estimate.request import DEFAULT_HEADROOM, METHODS, PRECISIONS, Request
from goldenenv.userfile import as_written

SPEC_KEYS = ("params", "tokens", "hours", "method", "precision", "zero", "offload", "offload_params", "zero_init",
             "seq_len", "micro_batch", "grad_accum", "layers", "hidden", "heads", "kv_heads", "model", "config",
             "checkpointing", "attention", "gpu", "instance_type", "gpus_per_node", "nodes", "mfu", "deadline",
             "trainable_fraction", "deepspeed", "lock", "headroom", "price", "currency", "scaling_efficiency",
             "egress_gb", "dataset_gb", "checkpoint_gb", "idle_hours", "allow_tcp", "lora_rank", "lora_targets",
             "modules_to_save", "adapter_config")
BOOLEANS = ("offload", "offload_params", "zero_init", "checkpointing", "allow_tcp")
TEXTS = ("method", "precision", "model", "config", "attention", "gpu", "instance_type", "deepspeed", "lock",
         "currency", "adapter_config")
LISTS = ("lora_targets", "modules_to_save")
"""Keys taking several names: a YAML list, or one text with commas (as the flags take them)."""
TRUE_WORDS = ("true", "yes", "on")
FALSE_WORDS = ("false", "no", "off")
NUMBERS = tuple(k for k in SPEC_KEYS if k not in BOOLEANS + TEXTS + LISTS)

# Ranges: a value outside is a typo or an overflow, never a run.
RANGES: dict[str, tuple[type, float | None, float | None, float]] = {
    # key: (kind, minimum (inclusive) or None, above (exclusive) or None, maximum)
    "params": (float, None, 0, 1e14),
    "tokens": (float, None, 0, 1e16),
    "hours": (float, None, 0, 24 * 366 * 10),
    "zero": (int, 0, None, 3),
    "seq_len": (int, 1, None, 10_000_000),
    "micro_batch": (int, 1, None, 65_536),
    "grad_accum": (int, 1, None, 65_536),
    "layers": (int, 1, None, 10_000),
    "hidden": (int, 1, None, 1_000_000),
    "heads": (int, 1, None, 100_000),
    "kv_heads": (int, 1, None, 100_000),
    "gpus_per_node": (int, 1, None, 64),
    "nodes": (int, 1, None, 100_000),
    "mfu": (float, None, 0, 1),
    "deadline": (float, None, 0, 24 * 366 * 10),
    "trainable_fraction": (float, None, 0, 1),
    "headroom": (float, 0, None, 0.9),
    "price": (float, 0, None, 1e6),
    "scaling_efficiency": (float, None, 0, 1),
    "egress_gb": (float, 0, None, 1e9),
    "dataset_gb": (float, 0, None, 1e9),
    "checkpoint_gb": (float, 0, None, 1e9),
    "idle_hours": (float, 0, None, 24 * 366 * 10),
    "lora_rank": (int, 1, None, 65_536),
}


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def spec_problems(loaded: object, where: str) -> tuple[dict, list[str]]:
    """The values of a --spec file or a stack's run.estimate, as written, and the problems of shape only: not a
    mapping, an unknown key, a list or mapping where one value belongs. Values are parsed by request_from, by the
    same rules as the flags. `where` names the file in messages."""
    if not isinstance(loaded, dict):
        return {}, [f"{where}: must be a mapping of estimate keys to values; got {as_written(loaded)}"]
    values, problems = {}, []
    for key, value in loaded.items():
        name = str(key).replace("-", "_")
        if name not in SPEC_KEYS:
            near = difflib.get_close_matches(name, SPEC_KEYS, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            problems.append(f"{where}: unknown key {key!r}; {hint}valid: {', '.join(SPEC_KEYS)}")
        elif value is None:
            continue
        elif isinstance(value, dict) or (isinstance(value, list) and name not in LISTS):
            problems.append(f"{where}: {key}: {as_written(value)} holds several values; write one"
                            + (" (true or false)" if name in BOOLEANS else " (a number)" if name in NUMBERS else ""))
        else:
            values[name] = value
    return values, problems


def boolean(raw: object) -> bool | None:
    """true/false, yes/no, on/off in any case (YAML 1.1's booleans, which a spec file written by hand uses), or a
    boolean already; None for anything else."""
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def names(raw: object) -> list[str]:
    """A list of names from a YAML list or one text with commas."""
    items = raw if isinstance(raw, list) else str(raw).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def request_from(values: dict, *, named: dict[str, str] | None = None, partial: bool = False):
    """A Request from values (keys as SPEC_KEYS, None for unset), or the problems, one per flag or key.

    named: how to name each key in messages (a spec file's `run.yaml: zero`); the flag by default.
    partial: a source of values could not be read, so nothing is reported as missing (it may be in that source)."""
    named = named or {}
    problems: list[str] = []

    def name(key: str) -> str:
        return named.get(key, flag(key))

    def number(key: str, *, required: bool = False):
        raw = values.get(key)
        kind, minimum, above, maximum = RANGES[key]
        if raw is None:
            if required and not partial:
                problems.append(f"{name(key)}: required (a number, e.g. 13e9)")
            return None
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
            if not math.isfinite(value):
                problems.append(f"{name(key)}: {raw} is not a finite number; give one from "
                                f"{_range(minimum, above, maximum)}")
                return None
            if kind is int:
                if value != int(value):
                    raise ValueError
                value = int(value)
        except (TypeError, ValueError, OverflowError):
            problems.append(f"{name(key)}: {as_written(raw)} is not {'a whole number' if kind is int else 'a number'}; "
                            f"write one {_range(minimum, above, maximum)}{'' if kind is int else ' (13e9 reads too)'}")
            return None
        if (above is not None and not value > above) or (minimum is not None and value < minimum) or value > maximum:
            problems.append(f"{name(key)}: {raw} is out of range, valid is {_range(minimum, above, maximum)}")
            return None
        return value

    def choice(key: str, valid, default):
        raw = values.get(key)
        if raw is None:
            return default
        if str(raw).lower() not in valid:
            problems.append(f"{name(key)}: {raw!r} is not one of {', '.join(valid)}")
            return default
        return str(raw).lower()

    hours = number("hours")
    tokens = number("tokens", required=hours is None)
    if hours is not None and tokens is not None:
        problems.append(f"{name('hours')}: give --tokens or --hours, not both (--hours is the run's time at "
                        "perfect scaling when you already know it)")
    nums = {k: number(k) for k in ("zero", "seq_len", "micro_batch", "grad_accum", "gpus_per_node", "nodes", "mfu",
                                   "deadline", "trainable_fraction", "layers", "hidden", "heads", "kv_heads",
                                   "headroom", "price", "scaling_efficiency", "egress_gb", "dataset_gb",
                                   "checkpoint_gb", "idle_hours", "lora_rank")}
    lora_given = [k for k in ("lora_rank", "lora_targets", "modules_to_save", "adapter_config")
                  if values.get(k) is not None]
    method = choice("method", METHODS, "lora" if lora_given and values.get("method") is None else "full")
    precision = choice("precision", PRECISIONS, "bf16")
    attention = choice("attention", mem.ATTENTION, "flash")

    shape = None
    if values.get("model") is not None and values.get("config") is not None:
        problems.append(f"{name('config')}: give --model or --config, not both")
    elif values.get("model") is not None:
        shape = shapes.from_catalog(str(values["model"]))
        if shape is None:
            problems.append(f"{name('model')}: {values['model']!r} is not a catalog model; valid: "
                            f"{', '.join(catalog.models())}, or --config config.json")
    elif values.get("config") is not None:
        try:
            shape = shapes.from_config(Path(str(values["config"])))
        except shapes.ConfigError as e:
            problems.append(f"{name('config')}: {e}")
    params = number("params", required=hours is None and shape is None)
    layers, hidden, heads, kv_heads = (nums[k] for k in ("layers", "hidden", "heads", "kv_heads"))
    if (values.get("layers") is None) != (values.get("hidden") is None):
        problems.append(f"{name('hidden') if layers else name('layers')}: give --layers and --hidden together")
    elif layers and hidden:
        if heads and hidden % heads:
            problems.append(f"{name('heads')}: {heads} does not divide --hidden {hidden}")
        else:
            shape = shapes.with_layers(shape, layers, hidden, heads, params)
    if kv_heads is not None:
        if shape is None and params is None:
            problems.append(f"{name('kv_heads')}: needs a model (--params, --model, --config or --layers/--hidden)")
        else:
            base = shape or shapes.infer(params)
            if base.heads % kv_heads:
                problems.append(f"{name('kv_heads')}: {kv_heads} does not divide the {base.heads} attention heads")
            else:
                from dataclasses import replace
                shape = replace(base, kv_heads=kv_heads, params=params or base.params)

    gpu = instance = None
    if values.get("instance_type") is not None:
        instance = _instance(str(values["instance_type"]), name("instance_type"), problems)
    if values.get("gpu") is not None:
        gpu = next((g for g in catalog.gpus() if g.lower() == str(values["gpu"]).lower()), None)
        if gpu is None:
            problems.append(f"{name('gpu')}: {values['gpu']!r} is not a catalog GPU; valid: "
                            f"{', '.join(catalog.gpus())}")
        elif instance is not None and instance.gpu.name != gpu:
            problems.append(f"{name('gpu')}: {gpu} is not the GPU of {instance.name} ({instance.gpu.name}); drop one")
    gpus_per_node = nums["gpus_per_node"]
    if instance is not None:
        if gpus_per_node is not None and gpus_per_node != instance.gpu_count:
            problems.append(f"{name('gpus_per_node')}: {instance.name} has {instance.gpu_count} GPUs; drop the flag")
        gpus_per_node, gpu = instance.gpu_count, instance.gpu.name

    deepspeed, deepspeed_from = _deepspeed(values, name, problems)
    currency = str(values.get("currency") or "USD")
    if values.get("currency") is not None and not (currency.isalpha() and len(currency) == 3):
        problems.append(f"{name('currency')}: {currency!r} is not a currency code (three letters, e.g. USD, CNY)")
    if values.get("currency") is not None and nums["price"] is None:
        problems.append(f"{name('currency')}: goes with --price (the price per GPU-hour in that currency)")

    adapter = _adapter(values, method, lora_given, nums, shape or (shapes.infer(params) if params else None),
                       name, problems)
    booleans = {k: values.get(k) for k in BOOLEANS}
    for key, value in booleans.items():
        if value is not None and boolean(value) is None:
            problems.append(f"{name(key)}: {as_written(value)} is not true or false; write true or false "
                            "(yes/no and on/off read the same)")
            booleans[key] = None
        elif value is not None:
            booleans[key] = boolean(value)
    offload, offload_params = bool(booleans["offload"]), bool(booleans["offload_params"])
    stage = nums["zero"] if nums["zero"] is not None else 0
    if offload and stage == 0:
        problems.append(f"{name('offload')}: needs --zero 1, 2 or 3 (ZeRO-Offload partitions the optimizer first)")
    if offload_params and stage != 3:
        problems.append(f"{name('offload_params')}: needs --zero 3")
    if (offload or offload_params) and precision == "fp32":
        problems.append(f"{name('offload')}: DeepSpeed's offload estimates are for bf16/fp16 training; "
                        "drop --precision fp32 or the offload")
    if problems:
        return None, problems
    req = Request(
        params=params, tokens=tokens, hours=hours, method=method, precision=precision, zero=stage,
        offload=offload or offload_params, offload_params=offload_params,
        zero_init=True if booleans["zero_init"] is None else booleans["zero_init"],
        seq_len=nums["seq_len"] or 4096, micro_batch=nums["micro_batch"] or 1, grad_accum=nums["grad_accum"] or 1,
        shape=shape, checkpointing=True if booleans["checkpointing"] is None else booleans["checkpointing"],
        attention=attention, gpu=gpu, instance=instance, gpus_per_node=gpus_per_node or 8, nodes=nums["nodes"] or 1,
        mfu=nums["mfu"], deadline_hours=nums["deadline"],
        trainable_fraction=nums["trainable_fraction"], lora=adapter,
        deepspeed=deepspeed, deepspeed_from=deepspeed_from,
        headroom=DEFAULT_HEADROOM if nums["headroom"] is None else nums["headroom"],
        price=nums["price"], currency=currency.upper(), scaling_efficiency=nums["scaling_efficiency"],
        egress_gb=nums["egress_gb"] or 0.0, dataset_gb=nums["dataset_gb"] or 0.0,
        checkpoint_gb=nums["checkpoint_gb"] or 0.0, idle_hours=nums["idle_hours"] or 0.0,
        allow_tcp=bool(booleans["allow_tcp"]),
    )
    return req, []


def _adapter(values: dict, method: str, given: list[str], nums: dict, shape, name, problems: list[str]):
    """The LoRA as PEFT would build it, from --lora-rank/--lora-targets/--modules-to-save or --adapter-config (a
    PEFT adapter_config.json); PEFT's defaults, said so in the output, when LoRA/QLoRA is asked for with none."""
    fraction = nums["trainable_fraction"]
    if method == "full":
        for key in given + (["trainable_fraction"] if fraction is not None else []):
            problems.append(f"{name(key)}: describes a LoRA; add --method lora or qlora (full training trains "
                            "every weight)")
        return None
    if fraction is not None and given:
        problems.append(f"{name('trainable_fraction')}: give the LoRA ({', '.join(flag(k) for k in given)}) or "
                        "--trainable-fraction, not both")
        return None
    if not given:
        return None if fraction is not None else lora.Adapter(assumed=True)
    if values.get("adapter_config") is not None:
        if len(given) > 1:
            problems.append(f"{name('adapter_config')}: give --adapter-config or --lora-rank/--lora-targets/"
                            "--modules-to-save, not both")
            return None
        path = Path(str(values["adapter_config"]))
        try:
            rank, targets, saved = lora.read_adapter_config(path)
        except lora.AdapterConfigError as e:
            problems.append(f"{name('adapter_config')}: {e}")
            return None
        source = f"{path} (PEFT adapter_config.json)"
        target_key = saved_key = "adapter_config"
    else:
        rank = nums["lora_rank"] or lora.DEFAULT_RANK
        targets = tuple(names(values["lora_targets"])) if values.get("lora_targets") is not None \
            else lora.DEFAULT_TARGETS
        saved = tuple(names(values["modules_to_save"])) if values.get("modules_to_save") is not None else ()
        source = ", ".join(f"{name(k)} {_shown(values[k])}" for k in given if k != "adapter_config")
        if values.get("lora_targets") is None:
            source += f" (PEFT's default targets {', '.join(targets)})"
        target_key, saved_key = "lora_targets", "modules_to_save"
    if shape is not None:
        valid = lora.valid_targets(shape)
        wrong = [t for t in targets if t not in valid]
        if wrong:
            problems.append(f"{name(target_key)}: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not a "
                            f"module of this model; valid: {', '.join(valid)}")
        elif lora.ALL_LINEAR in targets and len(targets) > 1:
            problems.append(f"{name(target_key)}: all-linear stands alone (every Linear but the output layer); "
                            "drop the other names")
    if not targets:
        problems.append(f"{name(target_key)}: names no module; write e.g. q_proj,v_proj or all-linear")
    wrong_saved = [m for m in saved if m not in lora.SAVABLE]
    if wrong_saved:
        problems.append(f"{name(saved_key)}: {', '.join(wrong_saved)} cannot be counted; valid: "
                        f"{', '.join(lora.SAVABLE)}")
    return lora.Adapter(rank, tuple(targets), tuple(saved), source)


def _shown(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _range(minimum, above, maximum) -> str:
    low = f"above {above:g}" if above is not None else f"at least {minimum:g}"
    return f"{low} and at most {maximum:g}"


def _instance(text: str, label: str, problems: list[str]):
    cloud, _, name = text.rpartition(":")
    found = [catalog.instance_type(r["cloud"], r["instance_type"]) for r in catalog.rows("instance_types")
             if r["instance_type"] == name and (not cloud or r["cloud"] == cloud)]
    if len(found) == 1:
        return found[0]
    valid = ", ".join(f"{r['cloud']}:{r['instance_type']}" for r in catalog.rows("instance_types"))
    problems.append(f"{label}: {text!r} is not a catalog instance type; valid: {valid}")
    return None


def _deepspeed(values: dict, name, problems: list[str]) -> tuple[tuple[int, ...] | None, str]:
    """The DeepSpeed version whose formulas apply: --deepspeed, else the lock's pin, else the newest known."""
    given, lock_name = values.get("deepspeed"), values.get("lock")
    if given is not None and lock_name is not None:
        problems.append(f"{name('deepspeed')}: give --deepspeed or --lock, not both")
        return None, ""
    if given is not None:
        text = str(given)
        if not text.replace(".", "").isdigit() or not catalog.version_tuple(text):
            problems.append(f"{name('deepspeed')}: {text!r} is not a release number (e.g. 0.16.9)")
            return None, ""
        return catalog.version_tuple(text), f"--deepspeed {text}"
    if lock_name is not None:
        pinned = lock_deepspeed(str(lock_name), name("lock"), problems)
        if pinned is None:
            return None, ""
        return catalog.version_tuple(pinned), f"the {lock_name} lock's pin {pinned}"
    newest = ".".join(map(str, mem.newest_deepspeed()))
    return None, f"no lock given: the newest formulas the catalog knows (DeepSpeed {newest} and later)"


def lock_deepspeed(lock_name: str, label: str, problems: list[str]) -> str | None:
    from goldenenv import project
    from goldenenv.images import lock as locks
    from goldenenv.spec import ConfigError

    try:
        try:
            project.current()
            found = locks.load(lock_name)
        except project.NoProject:
            found = locks.load(lock_name, project.packaged("images"))
    except ConfigError as e:
        problems.append(f"{label}: {e.problems[0]}")
        return None
    if found.deepspeed is None:
        problems.append(f"{label}: the {lock_name} lock pins no DeepSpeed; give --deepspeed VERSION")
        return None
    return str(found.deepspeed)
