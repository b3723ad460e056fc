"""The versioned schedule store (format ``loopcoll.store/1``): a directory and its one manifest.

A deployed schedule is ``(comm, collective, version)``; versions count up from 1 per communicator and
collective. A version holds one or more size bands, each with the schedule's JSON and, when the
lowering succeeds, its MSCCL XML. Files are written first (each atomically, under a name no earlier
version uses) and ``manifest.json`` is replaced atomically last, so a crash at any point leaves the
previous manifest, and every file it names, intact. ``docs/controller.md`` §5 documents the layout.

Examples
--------
>>> import tempfile
>>> from synth import load_topology, synthesize
>>> topo = load_topology("ring:4")
>>> store = VersionStore(tempfile.mkdtemp())
>>> res = synthesize("allgather", topo)
>>> e = store.publish("world", "allgather", [(1, None, res)], reason="bootstrap", topology=topo)
>>> e.version, e.bands[0].schedule, e.bands[0].xml
(1, 'world/allgather/v1/b0.schedule.json', 'world/allgather/v1/b0.msccl.xml')
>>> store.load_schedule(e) == res.schedule
True
>>> VersionStore(store.directory, create=False).latest() == [e]
True
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msccl_xml import parse as parse_xml
from msccl_xml.deploy import DeployableVersion, fit_bands
from msccl_xml.limits import RUNTIMES
from msccl_xml.targets import MscclTarget, TorchTarget
from runtime.errors import StoreError
from runtime.formats.identity import MAX_VERSION, check_digest, check_epoch, new_epoch, sha256_hex, version_digest
from synth import CutLink, LoopcollError, Schedule, ScheduleError, SynthResult, Topology
from synth.figures import warm_mode_of
from synth.fileio import write_bytes_atomic, write_text_atomic

__all__ = ["STORE_FORMAT", "Band", "VersionEntry", "VersionStore"]

STORE_FORMAT = "loopcoll.store/1"
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MAX_MANIFEST_BYTES = 64 << 20
_XML, _NO_XML = MscclTarget("msccl-executor-nccl"), TorchTarget()


@dataclass(frozen=True, slots=True)
class Band:
    """One size band of a version: sizes ``min_bytes <= S <= max_bytes`` (``None``: no upper end).

    ``schedule`` and ``xml`` are paths relative to the store directory; ``xml`` is ``None`` when the
    schedule does not lower to MSCCL XML, and ``xml_error`` then says why. ``schedule_sha256`` and
    ``xml_sha256`` are the sha256 hex of those files' bytes (``None`` in a manifest written before them).
    """

    min_bytes: int
    max_bytes: int | None
    schedule: str
    xml: str | None = None
    xml_error: str | None = None
    schedule_sha256: str | None = None
    xml_sha256: str | None = None

    @property
    def digest(self) -> str | None:
        """The band's digest: its XML's, else its schedule's (``DeployedBand.digest``)."""
        return self.xml_sha256 if self.xml is not None else self.schedule_sha256

    def covers(self, nbytes: int) -> bool:
        """Whether a collective of ``nbytes`` bytes falls in this band."""
        return self.min_bytes <= nbytes and (self.max_bytes is None or nbytes <= self.max_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"min_bytes": self.min_bytes, "max_bytes": self.max_bytes, "schedule": self.schedule,
                "xml": self.xml, "xml_error": self.xml_error, "schedule_sha256": self.schedule_sha256,
                "xml_sha256": self.xml_sha256}


@dataclass(frozen=True, slots=True)
class VersionEntry:
    """One published version: its bands, what it was made for, and why (the manifest entry)."""

    comm: str
    collective: str
    version: int
    bands: tuple[Band, ...]
    topology_fingerprint: str
    capacities_gbps: Mapping[str, float]
    cut: tuple[CutLink, ...]
    algbw_GBps: float  # noqa: N815
    optimal_algbw_GBps: float  # noqa: N815
    reason: str
    verdict: Mapping[str, Any] | None = None
    trigger_samples: int = 0
    created_t_s: float = 0.0
    warm_mode: str | None = None
    synth_time_s: float = 0.0
    status: str = "optimal"
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    epoch: str = ""

    @property
    def digest(self) -> str | None:
        """The version's digest over its bands (``DeployableVersion.digest``); None without band digests."""
        if any(b.digest is None for b in self.bands):
            return None
        return version_digest((b.min_bytes, b.max_bytes, str(b.digest)) for b in self.bands)

    def band_for(self, nbytes: int) -> int:
        """Index of the band covering ``nbytes`` (the nearest band when none covers it)."""
        for i, b in enumerate(self.bands):
            if b.covers(nbytes):
                return i
        return min(range(len(self.bands)), key=lambda i: abs(self.bands[i].min_bytes - nbytes))

    def to_dict(self) -> dict[str, Any]:
        """The manifest entry as JSON-able data (what the daemon pushes on the wire)."""
        return {
            "comm": self.comm, "collective": self.collective, "version": self.version,
            "bands": [b.to_dict() for b in self.bands],
            "topology_fingerprint": self.topology_fingerprint,
            "capacities_gbps": dict(sorted(self.capacities_gbps.items())),
            "cut": [c.to_dict() for c in self.cut],
            "algbw_GBps": self.algbw_GBps, "optimal_algbw_GBps": self.optimal_algbw_GBps,
            "reason": self.reason, "verdict": None if self.verdict is None else dict(self.verdict),
            "trigger_samples": self.trigger_samples, "created_t_s": self.created_t_s,
            "warm_mode": self.warm_mode, "synth_time_s": self.synth_time_s, "status": self.status,
            "extra": dict(self.extra), "epoch": self.epoch, "digest": self.digest,
        }

    @classmethod
    def from_dict(cls, doc: Any, *, where: str = "manifest entry") -> VersionEntry:
        """Read an entry back; :class:`StoreError` naming the field when it is malformed."""
        if not isinstance(doc, Mapping):
            raise StoreError(f"{where}: must be an object")
        try:
            bands = tuple(
                Band(int(b["min_bytes"]), None if b.get("max_bytes") is None else int(b["max_bytes"]),
                     str(b["schedule"]), None if b.get("xml") is None else str(b["xml"]),
                     None if b.get("xml_error") is None else str(b["xml_error"]),
                     check_digest(b.get("schedule_sha256"), f"{where}: bands[{i}].schedule_sha256"),
                     check_digest(b.get("xml_sha256"), f"{where}: bands[{i}].xml_sha256"))
                for i, b in enumerate(doc["bands"]))
            cut = tuple(CutLink.from_dict(c, source=f"{where}: cut") for c in doc.get("cut", ()))
            verdict = doc.get("verdict")
            entry = cls(
                comm=str(doc["comm"]), collective=str(doc["collective"]), version=int(doc["version"]),
                bands=bands, topology_fingerprint=str(doc["topology_fingerprint"]),
                capacities_gbps=MappingProxyType({str(k): float(v) for k, v in doc["capacities_gbps"].items()}),
                cut=cut, algbw_GBps=float(doc["algbw_GBps"]), optimal_algbw_GBps=float(doc["optimal_algbw_GBps"]),
                reason=str(doc["reason"]),
                verdict=None if verdict is None else MappingProxyType(dict(verdict)),
                trigger_samples=int(doc.get("trigger_samples", 0)), created_t_s=float(doc.get("created_t_s", 0.0)),
                warm_mode=None if doc.get("warm_mode") is None else str(doc["warm_mode"]),
                synth_time_s=float(doc.get("synth_time_s", 0.0)), status=str(doc.get("status", "optimal")),
                extra=MappingProxyType(dict(doc.get("extra") or {})),
                epoch="" if doc.get("epoch") in (None, "") else check_epoch(doc["epoch"], f"{where}: epoch"),
            )
        except ScheduleError as exc:
            raise StoreError(str(exc)) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"{where}: malformed ({type(exc).__name__}: {str(exc)[:120]})") from None
        if not bands:
            raise StoreError(f"{where}: has no bands")
        if not 1 <= entry.version <= MAX_VERSION:
            raise StoreError(f"{where}: version {str(entry.version)[:40]} is outside 1..{MAX_VERSION}")
        if doc.get("digest") is not None and doc["digest"] != entry.digest:
            raise StoreError(f"{where}: digest {str(doc['digest'])[:80]!r} is not that of its bands")
        return entry

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VersionEntry):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


def _check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME_OK.fullmatch(value):
        raise StoreError(f"{what} {str(value)[:60]!r} cannot name a store directory "
                         "(letters, digits, '.', '_', '-'; at most 128 characters)")
    return value


def _newest(entries: Iterable[VersionEntry]) -> dict[tuple[str, str], VersionEntry]:
    """The entry of the highest version per (comm, collective)."""
    best: dict[tuple[str, str], VersionEntry] = {}
    for e in entries:
        key = (e.comm, e.collective)
        if key not in best or e.version > best[key].version:
            best[key] = e
    return best


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 0.0


class VersionStore:
    """A store directory: ``manifest.json`` plus ``<comm>/<collective>/v<N>/`` per version.

    Thread-safe: publishing holds a lock, so a daemon may publish and serve reads concurrently.
    """

    def __init__(self, directory: str | os.PathLike[str], *, create: bool = True) -> None:
        self.directory = Path(directory)
        self._lock = threading.RLock()
        self._entries: list[VersionEntry] = []
        #: This store's epoch (the manifest's; a new one for a store without a manifest).
        self.epoch = new_epoch()
        if not self.directory.is_dir():
            if not create:
                raise StoreError(f"store directory {str(self.directory)!r} does not exist")
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"store directory {str(self.directory)!r}: cannot create: "
                                 f"{exc.strerror or exc}") from exc
        if create and not os.access(self.directory, os.W_OK | os.X_OK):
            raise StoreError(f"store directory {str(self.directory)!r} is not writable")
        self._entries = self._read_manifest()
        self._verify_files(self._entries)

    # -- manifest ---------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.directory / "manifest.json"

    def _read_manifest(self) -> list[VersionEntry]:
        p = self.manifest_path
        if not p.exists():
            return []
        try:
            if p.stat().st_size > _MAX_MANIFEST_BYTES:
                raise StoreError(f"{p}: larger than {_MAX_MANIFEST_BYTES} bytes")
            doc = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise StoreError(f"{p}: cannot read: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise StoreError(f"{p}: not valid JSON ({str(exc)[:80]})") from None
        if not isinstance(doc, Mapping) or doc.get("format") != STORE_FORMAT:
            got = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
            raise StoreError(f"{p}: format must be {STORE_FORMAT!r}, got {str(got)[:60]!r}")
        raw = doc.get("versions")
        if not isinstance(raw, list):
            raise StoreError(f"{p}: 'versions' must be a list")
        if doc.get("epoch") is not None:
            self.epoch = check_epoch(doc["epoch"], f"{p}: epoch")
        elif raw:  # written before epochs: one derived from its first entry, the same at every load
            self.epoch = sha256_hex(json.dumps(raw[0], sort_keys=True).encode())[:16]
        entries = [VersionEntry.from_dict(e, where=f"{p}: versions[{i}]") for i, e in enumerate(raw)]
        return [e if e.epoch else replace(e, epoch=self.epoch) for e in entries]

    def _verify_files(self, entries: Sequence[VersionEntry]) -> None:
        """Check every band file against its digest; the newest entry per (comm, collective) is parsed too."""
        newest = {id(e) for e in _newest(entries).values()}
        for e in entries:
            for b in e.bands:
                self.check_file(b.schedule, b.schedule_sha256, e.collective, parse=id(e) in newest)
                if b.xml is not None:
                    self.check_file(b.xml, b.xml_sha256, e.collective, parse=id(e) in newest)

    def check_file(self, relative: str, sha256: str | None, collective: str, *, parse: bool = True) -> bytes:
        """The bytes of store file ``relative``, checked against ``sha256`` and (``parse``) read as a
        schedule JSON or MSCCL XML of ``collective``; :class:`StoreError` naming the file otherwise."""
        p = self.path(relative)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise StoreError(f"{p}: cannot read: {exc.strerror or exc}") from None
        if sha256 is not None and sha256_hex(data) != sha256:
            raise StoreError(f"{p}: content does not match its sha256 in the manifest (changed or swapped)")
        if parse:
            try:
                text = data.decode("utf-8")
                got = (parse_xml(text, source=str(p)).coll if p.suffix == ".xml"
                       else Schedule.from_json(text, source=str(p)).collective)
            except UnicodeDecodeError:
                raise StoreError(f"{p}: not UTF-8 text") from None
            except LoopcollError as exc:
                raise StoreError(f"{p}: {str(exc)[:300]}") from None
            if str(got).replace("_", "") != collective.replace("_", ""):  # reduce_scatter: XML's old spelling
                raise StoreError(f"{p}: holds a {got} program, but its manifest entry is {collective}")
        return data

    def _write_manifest(self, entries: Sequence[VersionEntry]) -> None:
        doc = {"format": STORE_FORMAT, "epoch": self.epoch, "versions": [e.to_dict() for e in entries]}
        try:
            write_text_atomic(self.manifest_path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
        except LoopcollError as exc:
            raise StoreError(f"store {str(self.directory)!r}: cannot write manifest: {exc}") from exc

    def reload(self) -> list[VersionEntry]:
        """Re-read the manifest from disk (another process may have published)."""
        with self._lock:
            entries = self._read_manifest()
            self._verify_files(entries)
            self._entries = entries
            return list(self._entries)

    # -- queries ----------------------------------------------------------------------------
    def entries(self) -> list[VersionEntry]:
        """Every version, in publication order (a snapshot: never waits for a publication)."""
        return list(self._entries)  # publish replaces the list, never mutates it

    def latest(self, comm: str | None = None, collective: str | None = None) -> list[VersionEntry]:
        """The newest version of each (comm, collective), sorted by name; optionally filtered."""
        best = _newest(e for e in self.entries()
                       if (comm is None or e.comm == comm) and (collective is None or e.collective == collective))
        return [best[k] for k in sorted(best)]

    def next_version(self, comm: str, collective: str) -> int:
        return max((e.version for e in self.entries() if e.comm == comm and e.collective == collective),
                   default=0) + 1

    def path(self, relative: str) -> Path:
        """The absolute path of a store file; refuses paths that would leave the directory."""
        if not isinstance(relative, str) or not relative or "\x00" in relative or Path(relative).is_absolute():
            raise StoreError(f"store path {str(relative)[:80]!r} is not a relative path")
        root = self.directory.resolve()
        full = (root / relative).resolve()
        if full != root and root not in full.parents:
            raise StoreError(f"store path {relative[:80]!r} leaves the store directory")
        return full

    def load_schedule(self, entry: VersionEntry, band_index: int = 0) -> Schedule:
        """The schedule of one band of ``entry``."""
        if not 0 <= band_index < len(entry.bands):
            raise StoreError(f"{entry.comm}/{entry.collective} v{entry.version}: no band {band_index}")
        p = self.path(entry.bands[band_index].schedule)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise StoreError(f"{p}: cannot read schedule: {exc.strerror or exc}") from exc
        try:
            return Schedule.from_json(text, source=str(p))
        except LoopcollError as exc:
            raise StoreError(str(exc)) from exc

    # -- publishing -------------------------------------------------------------------------
    def publish(
        self,
        comm: str,
        collective: str,
        results_by_band: Sequence[tuple[int, int | None, SynthResult | Schedule]] | DeployableVersion,
        *,
        reason: str,
        topology: Topology,
        nominal: Topology | None = None,
        verdict: Mapping[str, Any] | None = None,
        trigger_samples: int = 0,
        created_t_s: float = 0.0,
        export_xml: bool = True,
        extra: Mapping[str, Any] | None = None,
        _fail_before_manifest: bool = False,
    ) -> VersionEntry:
        """Write a new version (files first, then the manifest) and return its entry.

        ``results_by_band`` is a fitted :class:`~msccl_xml.deploy.DeployableVersion` (its bands'
        bytes are written as they are; MSCCL XML when its target is an MSCCL runtime), or lists
        ``(min_bytes, max_bytes, result)``, fitted here with :func:`msccl_xml.deploy.fit_bands`
        (no re-synthesis): MSCCL XML of msccl-executor-nccl per band when ``export_xml``, an export
        error recorded in the band (``xml_error``), the schedule still published; a result shared by
        several bands is written once. ``topology`` is the (measured) topology the schedules were
        made for: its capacities go into the entry (only the links that differ from ``nominal`` when
        that is given). ``_fail_before_manifest`` raises after the files are written (crash tests).
        """
        _check_name(comm, "communicator")
        _check_name(collective, "collective")
        version = self._fitted(comm, collective, results_by_band, topology, export_xml)
        with self._lock:
            number = self.next_version(comm, collective)
            bands = self._write_bands(version, f"{comm}/{collective}/v{number}")
            first = version.result
            caps = {f"{lk.src}->{lk.dst}": lk.gbps for lk in topology.links}
            if nominal is not None:
                nom = {f"{lk.src}->{lk.dst}": lk.gbps for lk in nominal.links}
                caps = {k: v for k, v in caps.items() if nom.get(k) != v}
            warm_mode = None if first is None else warm_mode_of(first.figures)
            entry = VersionEntry(
                comm=comm, collective=collective, version=number, bands=tuple(self._digested(b) for b in bands),
                topology_fingerprint=topology.fingerprint, capacities_gbps=MappingProxyType(dict(sorted(caps.items()))),
                cut=version.schedule.bottleneck,
                algbw_GBps=_finite(version.algbw_GBps), optimal_algbw_GBps=_finite(version.optimal_algbw_GBps),
                reason=str(reason),
                verdict=None if verdict is None else MappingProxyType(json.loads(json.dumps(dict(verdict)))),
                trigger_samples=int(trigger_samples), created_t_s=float(created_t_s),
                warm_mode=None if warm_mode is None else str(warm_mode),
                synth_time_s=float(0.0 if first is None else first.solve_time_s),
                status=version.status, extra=MappingProxyType(dict(extra or {})), epoch=self.epoch,
            )
            if _fail_before_manifest:
                raise StoreError(f"{comm}/{collective} v{number}: injected failure before the manifest write")
            entries = [*self._entries, entry]
            self._write_manifest(entries)
            self._entries = entries
            return entry

    def _digested(self, band: Band) -> Band:
        """``band`` with the sha256 of the bytes its files were written with."""
        def sha(rel: str | None) -> str | None:
            return None if rel is None else sha256_hex(self.path(rel).read_bytes())
        return replace(band, schedule_sha256=sha(band.schedule), xml_sha256=sha(band.xml))

    @staticmethod
    def _fitted(comm: str, collective: str,
                given: Sequence[tuple[int, int | None, SynthResult | Schedule]] | DeployableVersion,
                topology: Topology, export_xml: bool) -> DeployableVersion:
        """``given`` as a version: itself, or its bands fitted to msccl-executor-nccl (torch without XML)."""
        if isinstance(given, DeployableVersion):
            return given
        if not given:
            raise StoreError(f"{comm}/{collective}: nothing to publish (no bands)")
        for i, (_, _, res) in enumerate(given):
            if isinstance(res, SynthResult) and res.schedule is None:
                raise StoreError(f"{comm}/{collective} band {i}: the synthesis produced no schedule")
        return fit_bands(given, topology, _XML if export_xml else _NO_XML, strict=False)

    def _write_bands(self, version: DeployableVersion, rel_dir: str) -> tuple[Band, ...]:
        """Write each band's schedule JSON and (MSCCL targets) XML under ``rel_dir``; a shared band refers
        to the files of the band it shares."""
        try:
            self.path(rel_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {str(self.directory)!r}: cannot create {rel_dir}: "
                             f"{exc.strerror or exc}") from exc
        xml = version.target in RUNTIMES
        bands: list[Band] = []
        for i, b in enumerate(version.bands):
            lo, hi = int(b.min_bytes), None if b.max_bytes is None else int(b.max_bytes)
            if b.shares is not None:
                same = bands[b.shares]
                bands.append(Band(lo, hi, same.schedule, same.xml, same.xml_error))
                continue
            rel = f"{rel_dir}/b{i}.schedule.json"
            try:  # the torch target's program is the schedule JSON: written as rendered, not serialised again
                write_bytes_atomic(self.path(rel), b.program if not xml and b.program is not None
                                   else b.schedule.to_json().encode("utf-8"))
            except LoopcollError as exc:
                raise StoreError(f"store {str(self.directory)!r}: cannot write {rel}: {exc}") from exc
            xml_rel: str | None = None
            xml_err = None if b.error is None or not xml else b.error[:500]
            if xml and b.program is not None:
                xml_rel = f"{rel_dir}/b{i}.msccl.xml"
                try:
                    write_bytes_atomic(self.path(xml_rel), b.program)
                except LoopcollError as exc:
                    xml_rel, xml_err = None, str(exc)[:500]
            bands.append(Band(lo, hi, rel, xml_rel, xml_err))
        return tuple(bands)
