"""Fetch real models shipped in wheels on PyPI into a cache: Google's MediaPipe models from the
mediapipe==0.10.14 wheel, and the microWakeWord streaming keyword spotters (int8, state in
resource variables, what ESPHome-style wake-word engines run) of pymicro-wakeword==2.5.0 (Apache-2.0).

    gles-fetch-models [--dir DIR] [--list] [--wake-words]

Each wheel (mediapipe 35.7 MB, pymicro-wakeword 2.1 MB) is downloaded once with pip (no
dependencies); its .tflite files are extracted and checked against known sha256 sums. The cache
is $GLES_DELEGATE_CACHE, else ~/.cache/gles_delegate.
"""
import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from gles_delegate.tools import common


@dataclasses.dataclass(frozen=True)
class Wheel:
    """A wheel on PyPI that ships models: `package`==`version` for `platform`, its models by name
    (the file's base name without .tflite) with their sha256."""
    package: str
    version: str
    platform: str
    sha256: dict

    @property
    def names(self):
        return sorted(self.sha256)


MEDIAPIPE = Wheel("mediapipe", "0.10.14", "manylinux2014_x86_64", {
    "face_detection_full_range_sparse": "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1",
    "face_detection_short_range": "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8",
    "face_landmark": "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814",
    "face_landmark_with_attention": "e06a804e0144f9929eda782122916b35d60c697c3c9344013ca2bbe76a6ce2b4",
    "hand_landmark_full": "11c272b891e1a99ab034208e23937a8008388cf11ed2a9d776ed3d01d0ba00e3",
    "hand_landmark_lite": "048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6",
    "hand_recrop": "67d996ce96f9d36fe17d2693022c6da93168026ab2f028f9e2365398d8ac7d5d",
    "iris_landmark": "d1744d2a09c25f501d39eba4faff47e53ecca8852c5ce19bce8eeac39357521f",
    "palm_detection_full": "1b14e9422c6ad006cde6581a46c8b90dd573c07ab7f3934b5589e7cea3f89a54",
    "palm_detection_lite": "e9a4aaddf90dda56a87235303cf00e4c2d3fb28725f68fd88772997dac905c18",
    "pose_detection": "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c",
    "pose_landmark_full": "e9a5c5cb17f736fafd4c2ec1da3b3d331d6edbe8a0d32395855aeb2cdfd64b9f",
    "selfie_segmentation": "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c",
    "selfie_segmentation_landscape": "a77d03f4659b9f6b6c1f5106947bf40e99d7655094b6527f214ea7d451106edd",
})
WAKE_WORDS = Wheel("pymicro-wakeword", "2.5.0", "manylinux_2_35_x86_64", {
    "alexa": "9011a8155b04de858c48038529235cbc0e42e9fca05a55bf588cb80a653a723b",
    "hey_jarvis": "21a7976add39ee24ec96c63d96b7aaa18e24d1d9824b963e451da8feb4b78b77",
    "hey_mycroft": "c2a9b6ed51182db72e014781d5a4ece1929dc232a40b5b4be384f0295f0e1571",
    "okay_nabu": "d89128c4d16a72de429119fb2254ce46649553c2a24f5dd840175c80d7b9d094",
})
SHA256 = MEDIAPIPE.sha256
MODEL_NAMES = MEDIAPIPE.names


def cache_dir(wheel=MEDIAPIPE):
    """Where `wheel`'s models are kept: $GLES_DELEGATE_CACHE or ~/.cache/gles_delegate, then
    PACKAGE-VERSION."""
    root = os.environ.get("GLES_DELEGATE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gles_delegate")
    return Path(root) / f"{wheel.package}-{wheel.version}"


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_wheel(wheel, dest):
    requirement = f"{wheel.package}=={wheel.version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", requirement,
           "--only-binary=:all:", "--platform", wheel.platform, "--python-version", "3.11",
           "--implementation", "cp", "--abi", "cp311", "-d", str(dest)]
    done = subprocess.run(cmd)
    if done.returncode:  # pip said why on stderr: most often, no route to PyPI
        raise OSError(f"`pip download {requirement}` failed with exit status {done.returncode}")
    found = sorted(Path(dest).glob(f"{wheel.package.replace('-', '_')}-{wheel.version}-*.whl"))
    if not found:
        raise RuntimeError(f"pip download left no {wheel.package} wheel in {dest}")
    return found[0]


def fetch_models(directory=None, wheel=MEDIAPIPE):
    """Ensure all of `wheel`'s models (default: the 14 MediaPipe models) are in `directory`
    (default: the cache); returns {name: path}.

    Files are written to a temporary name and renamed, so an interrupted fetch leaves no
    half-written model; a file whose sha256 does not match is fetched again.
    """
    directory = Path(directory) if directory else cache_dir(wheel)
    paths = {name: directory / f"{name}.tflite" for name in wheel.names}
    if all(p.exists() and _sha256(p) == wheel.sha256[n] for n, p in paths.items()):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        downloaded = _download_wheel(wheel, tmp)
        with zipfile.ZipFile(downloaded) as archive:
            for info in archive.infolist():
                name = os.path.basename(info.filename)[:-len(".tflite")]
                if not info.filename.endswith(".tflite") or name not in wheel.sha256:
                    continue
                staged = Path(tmp) / f"{name}.tflite"
                staged.write_bytes(archive.read(info))
                if _sha256(staged) != wheel.sha256[name]:
                    raise RuntimeError(f"{info.filename} in {downloaded.name} has an unexpected sha256")
                os.replace(staged, paths[name])
    missing = [n for n, p in paths.items() if not p.exists()]
    if missing:
        raise RuntimeError(f"the {wheel.package} wheel did not contain {missing}")
    return paths


def model_path(name):
    """Path of one MediaPipe model by name (fetching all of them on first use)."""
    if name not in SHA256:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
    return fetch_models()[name]


def build_parser():
    parser = common.tool_parser("gles-fetch-models", __doc__)
    parser.add_argument("--dir", type=common.output_dir, help="target directory (default: the cache)")
    parser.add_argument("--list", action="store_true", help="only list the models and whether each is there")
    parser.add_argument("--wake-words", action="store_true",
                        help="the microWakeWord models of pymicro-wakeword rather than MediaPipe's")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    wheel = WAKE_WORDS if args.wake_words else MEDIAPIPE
    if args.list:
        directory = Path(args.dir) if args.dir else cache_dir(wheel)
        for name in wheel.names:
            there = (directory / f"{name}.tflite").exists()
            print(f"{name:<32}  {'fetched' if there else 'not fetched'}")
        return 0
    for name, path in fetch_models(args.dir, wheel).items():
        print(f"{path.stat().st_size:>9}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
