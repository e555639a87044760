"""`cdk synth` through the real CLI, offline; and the real Lambda asset: its size, and that every handler
imports from it alone under the Lambda runtime's Python."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.asset import (
    LAMBDA_PYTHON_VERSION,
    MANIFEST_NAME,
    MAX_UNZIPPED_BYTES,
    REPO_ROOT,
    RUNTIME_PROVIDED,
    build_asset,
    find_runtime_python,
    tree_size,
)

pytestmark = pytest.mark.infra

# STATESTORE_CDK_CLI points the test at another CLI build, e.g. to try a version before pinning it.
CDK_CLI = Path(os.environ.get("STATESTORE_CDK_CLI", REPO_ROOT / "node_modules" / ".bin" / "cdk"))
HANDLER_MODULES = sorted(
    f"lambdas.{path.stem}" for path in (REPO_ROOT / "lambdas").glob("*.py") if not path.stem.startswith("_")
)


def cdk(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CDK CLI as `make synth` does: the venv's python first on PATH, no AWS account involved."""
    if not CDK_CLI.exists():
        pytest.fail(f"no CDK CLI at {CDK_CLI}: run `make node` (npm ci) first")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("AWS_")
    }  # nothing to look an account up with
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        CDK_DISABLE_CLI_TELEMETRY="true",
    )
    result = subprocess.run(
        [str(CDK_CLI), *args, "--no-notices", "--no-version-reporting"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if "schema version mismatch" in result.stderr.lower():
        pytest.fail(
            "the CDK CLI cannot read the cloud assembly of the pinned aws-cdk-lib:\n"
            f"{result.stderr.strip()}\n"
            "Pin an aws-cdk CLI that reads it in package.json: 2.1148.1 does (npm's latest, 3.0.0, is older)."
        )
    return result


def test_cdk_synth_writes_the_template_offline(tmp_path: Path, fake_asset: Path) -> None:
    out = tmp_path / "cdk.out"
    result = cdk("synth", "--quiet", "-o", str(out), "-c", f"lambda_asset={fake_asset}")
    assert result.returncode == 0, result.stderr
    template = json.loads((out / "statestore-main.template.json").read_text())
    assert any(r["Type"] == "AWS::Lambda::Function" for r in template["Resources"].values())


def test_cdk_synth_without_the_asset_says_to_run_make_lambda_asset(tmp_path: Path) -> None:
    result = cdk(
        "synth", "--quiet", "-o", str(tmp_path / "cdk.out"), "-c", f"lambda_asset={tmp_path / 'none'}"
    )
    assert result.returncode != 0
    assert "make lambda-asset" in result.stderr


# --- the real asset -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_asset() -> Path:
    """The asset `make lambda-asset` builds, built once (and cached in build/ between runs)."""
    manifest = build_asset()
    assert manifest["python_version"] == LAMBDA_PYTHON_VERSION
    return REPO_ROOT / "build" / "lambda" / "asset"


@pytest.fixture(scope="session")
def runtime_python() -> str:
    python = find_runtime_python()
    if python is None:
        pytest.fail(
            f"no Python {LAMBDA_PYTHON_VERSION} here to import the asset with (its wheels are for it); "
            "install one (e.g. pyenv) or set STATESTORE_LAMBDA_PYTHON to one"
        )
    return python


@pytest.fixture(scope="session")
def runtime_provided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What Lambda's Python runtime brings (boto3 and its dependencies), linked from this venv."""
    folder = tmp_path_factory.mktemp("lambda-runtime-provided")
    for name in RUNTIME_PROVIDED:
        distribution = importlib.metadata.distribution(name)
        tops = {f.parts[0] for f in distribution.files or [] if not f.parts[0].endswith((".dist-info", ".."))}
        for top in tops - {"__pycache__", "bin"}:
            source = Path(str(distribution.locate_file(top)))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


def run_in_asset(python: str, asset: Path, runtime: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with nothing importable but the standard library, the asset and the runtime's boto3."""
    prelude = f"import sys; sys.path[:0] = [{str(asset)!r}, {str(runtime)!r}]\n"
    return subprocess.run(
        [python, "-I", "-S", "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            "AWS_REGION": "eu-west-2",
            "AWS_DEFAULT_REGION": "eu-west-2",
            "PATH": os.environ.get("PATH", ""),
        },
    )


def test_asset_fits_lambdas_unzipped_limit(real_asset: Path) -> None:
    size = tree_size(real_asset)
    manifest = json.loads((real_asset / MANIFEST_NAME).read_text())
    assert size < MAX_UNZIPPED_BYTES
    assert manifest["unzipped_bytes"] <= size  # the manifest was written before the manifest itself counted
    assert not (real_asset / "boto3").exists() and not (real_asset / "botocore").exists()


def test_trimmed_pyarrow_still_writes_and_reads_parquet(
    real_asset: Path, runtime_python: str, tmp_path: Path
) -> None:
    code = (
        "import io, pyarrow, pyarrow.parquet as pq, pyarrow.dataset, pyarrow.fs\n"
        "buffer = io.BytesIO(); pq.write_table(pyarrow.table({'n': [1, 2, 3]}), buffer)\n"
        "assert pq.read_table(io.BytesIO(buffer.getvalue())).column('n').to_pylist() == [1, 2, 3]\n"
        "print(pyarrow.__file__, flush=True)\n"
        # Arrow's thread pools occasionally abort at interpreter teardown ("terminate called without an
        # active exception") after the work succeeded; Lambda never tears the interpreter down between
        # invocations, so skip teardown rather than let that race fail the check.
        "import os; os._exit(0)\n"
    )
    result = run_in_asset(runtime_python, real_asset, tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(str(real_asset))


def test_there_are_handlers_to_import() -> None:
    assert HANDLER_MODULES, "no lambdas/*.py handler modules found"


@pytest.mark.parametrize("module", HANDLER_MODULES)
def test_handler_imports_from_the_asset_alone(
    real_asset: Path, runtime_python: str, runtime_provided: Path, module: str
) -> None:
    code = (
        "import importlib\n"
        f"handler_module = importlib.import_module({module!r})\n"
        "assert callable(handler_module.handler), 'no handler(event, context)'\n"
        "import pyarrow, statestore\n"
        f"assert statestore.__file__.startswith({str(real_asset)!r}), statestore.__file__\n"
    )
    result = run_in_asset(runtime_python, real_asset, runtime_provided, code)
    assert result.returncode == 0, f"importing {module} from the asset failed:\n{result.stderr}"
