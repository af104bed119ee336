"""`floe storage` on a real local folder: end-to-end check, durability, bad input."""

import os
import re
import shutil
import subprocess

import pytest


def run(floe_bin, *args, **kw):
    return subprocess.run([str(floe_bin), *args], capture_output=True, text=True, timeout=120, **kw)


def test_storage_check_passes_on_a_local_folder(floe_bin, tmp_path):
    res = run(floe_bin, "storage", "check", "--store", f"file://{tmp_path}/data")
    assert res.returncode == 0, res.stderr
    assert "read back 8 partitions byte-identical" in res.stdout
    assert "storage check passed" in res.stdout


def test_unknown_scheme_is_a_clear_error(floe_bin):
    res = run(floe_bin, "storage", "check", "--store", "ftp://example/x")
    assert res.returncode == 1
    assert "unknown store URL scheme" in res.stderr


def test_several_endpoints_without_ids_are_refused(floe_bin, tmp_path):
    res = run(floe_bin, "storage", "check", "--store", f"file://{tmp_path}/a,file://{tmp_path}/b")
    assert res.returncode == 1
    assert "needs an id" in res.stderr


def test_inspect_reports_corrupt_wal_footer(floe_bin, tmp_path):
    data = tmp_path / "data"
    (data / "x").mkdir(parents=True)
    good = run(floe_bin, "storage", "check", "--store", f"file://{data}")
    assert good.returncode == 0
    bad = data / "x" / "broken.wal"
    bad.write_bytes(b"\x00" * 100 + b"FLOEWAL1")
    res = run(floe_bin, "storage", "inspect", "--store", f"file://{data}", "x/broken.wal")
    assert res.returncode == 1
    assert "corrupt" in res.stderr


def test_storage_commands_default_to_the_standalone_store(floe_bin, tmp_path):
    """Without --store, `floe storage` looks at ./floe-data/store, where `floe standalone` keeps its log."""
    store = tmp_path / "floe-data" / "store"
    (store / "x").mkdir(parents=True)
    (store / "x" / "broken.wal").write_bytes(b"\x00" * 100 + b"FLOEWAL1")
    env = {k: v for k, v in os.environ.items() if k != "FLOE_STORE"}
    res = run(floe_bin, "storage", "inspect", "x/broken.wal", cwd=tmp_path, env=env)
    assert res.returncode == 1
    assert "corrupt" in res.stderr, res.stderr


def test_roles_refuse_a_zero_store_write_deadline(floe_bin, tmp_path):
    for role in (["broker", "--id", "1"], ["indexer"]):
        res = run(floe_bin, *role, "--meta", "127.0.0.1:1", "--store", f"file://{tmp_path}",
                  "--write-timeout-ms", "0", "--admin-listen", "127.0.0.1:0")
        assert res.returncode == 1, (role, res.stderr)
        assert "--write-timeout-ms must be above 0" in res.stderr, res.stderr


@pytest.mark.parametrize("records,flag,direct", [
    (10, "true", False), (20000, "true", True), (20000, None, True), (20000, "false", False)])
def test_local_put_fsyncs_file_before_rename_and_directory_after(
        floe_bin, tmp_path, records, flag, direct):
    """A put on the local backend returns only after the file and its folder are on disk:
    small puts through the page cache, large ones (64 KiB and up) with O_DIRECT when
    --store-direct-io is true (the default), through the page cache when it is false."""
    assert shutil.which("strace"), "strace is missing: tests/run.sh installs it"
    trace = tmp_path / "trace"
    data = tmp_path / "data"
    res = subprocess.run(
        ["strace", "-f", "-y", "-qq", "-e", "trace=openat,fsync,fdatasync,rename,renameat,renameat2",
         "-o", str(trace), str(floe_bin), "storage", "check", "--store", f"file://{data}",
         "--partitions", "2", "--records", str(records),
         *(["--store-direct-io", flag] if flag else [])],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = trace.read_text().splitlines()
    wal_path = re.search(r"wrote WAL object default:(\S+\.wal)", res.stdout).group(1)
    final = f"{data}/{wal_path}"
    rename_at = next(i for i, l in enumerate(lines) if "rename" in l and f'"{final}")' in l)
    staged = f"{final}#"
    synced_file = [i for i, l in enumerate(lines) if re.search(r"f(data)?sync\(\d+<" + re.escape(staged), l)]
    assert synced_file and synced_file[0] < rename_at, "file fsynced before it is published"
    opened = [l for l in lines if "openat(" in l and f'"{staged}' in l]
    assert opened, "the staging file is opened"
    assert ("O_DIRECT" in opened[0]) == direct, opened[0]
    parent = final.rsplit("/", 1)[0]
    synced_dir = [i for i, l in enumerate(lines)
                  if re.search(r"fsync\(\d+<" + re.escape(parent) + r">\)", l)]
    assert any(i > rename_at for i in synced_dir), "directory fsynced after the rename"
