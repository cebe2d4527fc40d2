"""Shared fixtures: tiny generated Korean-like headlines, and an environment that never
touches the network or the user's caches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from klue_tc.data.titles import LABEL_NAMES

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_TRAIN = SHARED / "data" / "klue-ynat-v1.1" / "train.tsv"
SHARED_KOBERT = SHARED / "models" / "kobert-base-v1" / "spiece.model"
EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))  # `+experiment=` choices

# Each topic has its own subjects and predicates, so the task is learnable; fillers are shared.
TOPIC_WORDS = {
    "IT과학": (
        ["삼성전자", "반도체", "인공지능", "카카오", "네이버", "스마트폰", "5G망", "클라우드"],
        ["신제품 공개", "기술 개발", "서비스 출시", "특허 확보", "연구 성과"],
    ),
    "경제": (
        ["코스피", "환율", "금리", "수출", "부동산", "물가", "한국은행", "증시"],
        ["상승 마감", "하락 전환", "최고치 경신", "둔화 우려", "반등 기대"],
    ),
    "사회": (
        ["경찰", "검찰", "법원", "소방당국", "교육청", "시민단체", "노조", "지자체"],
        ["수사 착수", "영장 청구", "대책 발표", "집회 개최", "조사 결과"],
    ),
    "생활문화": (
        ["드라마", "영화제", "전시회", "뮤지컬", "날씨", "여행지", "신간", "공연"],
        ["관객 몰려", "개막 앞둬", "인기 급상승", "맑고 포근", "첫선 보여"],
    ),
    "세계": (
        ["트럼프", "중국", "일본", "유럽연합", "유엔", "러시아", "백악관", "시진핑"],
        ["정상회담 개최", "제재 발표", "외교 갈등", "협정 서명", "성명 발표"],
    ),
    "스포츠": (
        ["손흥민", "류현진", "국가대표팀", "프로야구", "K리그", "올림픽", "토트넘", "kt위즈"],
        ["결승골 폭발", "역전승 거둬", "시즌 첫승", "우승 확정", "연패 탈출"],
    ),
    "정치": (
        ["국회", "문재인", "청와대", "여야", "민주당", "국무총리", "선관위", "한국당"],
        ["법안 처리", "회동 제안", "공천 논란", "개헌 논의", "특검 요구"],
    ),
}
FILLERS = ["오늘", "종합", "속보", "1보", "단독", "이번주", "2보", "…"]


def make_headlines(per_class: int = 12, seed: int = 0, labels=LABEL_NAMES) -> list[tuple[str, str]]:
    """(label name, title) pairs, shuffled."""
    rng = random.Random(seed)
    rows = []
    for label in labels:
        subjects, predicates = TOPIC_WORDS[label]
        for _ in range(per_class):
            words = [rng.choice(subjects), rng.choice(predicates)]
            if rng.random() < 0.5:
                words.insert(rng.randrange(3), rng.choice(FILLERS))
            rows.append((label, " ".join(words)))
    rng.shuffle(rows)
    return rows


def write_tsv(path: Path, rows: list[tuple[str, str]], label_as_id: bool = False) -> Path:
    lines = ["label\ttext"] + [f"{LABEL_NAMES.index(label) if label_as_id else label}\t{text}" for label, text in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# A slow test with no timeout of its own gets this, not pyproject's default (timeout = 300):
# several processes training at once on 2 busy cores can pass 5 minutes.
SLOW_TIMEOUT_S = 900


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


def pytest_runtest_setup(item):
    """A test marked `gpu` says what it needs and is skipped, with the reason, on a machine without."""
    if item.get_closest_marker("gpu"):
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False here")


@pytest.fixture(autouse=True)
def offline_isolated_env(tmp_path, monkeypatch):
    """No network, W&B offline, every cache under this test's tmp_path."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("KLUE_TC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setattr("klue_tc.data.titles._said_once", set())  # each test is a command of its own


@pytest.fixture
def headlines() -> list[tuple[str, str]]:
    return make_headlines()


@pytest.fixture
def tiny_tsv(tmp_path, headlines) -> Path:
    return write_tsv(tmp_path / "train.tsv", headlines)


# A model small enough to train in seconds on 2 cores.
TINY_MODEL = [
    "encoder.d_model=32",
    "encoder.heads=2",  # keys every encoder has: the FFN and conv keep their defaults
    "head.hidden=32",
    "tokenizer.vocab_size=400",
    "data.batch_size=16",
    "trainer.accelerator=cpu",
]


@pytest.fixture
def headlines_tsv(tmp_path) -> Path:
    return write_tsv(tmp_path / "train.tsv", make_headlines(per_class=14))
