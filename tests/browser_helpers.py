"""The demo's page in headless Debian chromium (selenium): one browser per test, and one query asked
the way a user asks it (the math example, Run, wait for "done"). Shared by the demo's tests on the
HF engine (test_ui.py) and through a started vLLM server (test_vllm_server.py)."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian chromium + chromium-driver "
                                    "(CI installs them)")


@contextmanager
def chromium(tmp_path: Path):
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1280,1600", f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def ask_the_math_example(driver, port: int, model: str, timeout: float) -> None:
    """Open the page, wait until it names `model`, run the math example and wait (up to `timeout`
    s) for it to run to an answer; the progress line must show while it runs and be hidden after."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"http://127.0.0.1:{port}/")
    assert "MetaAgent-X" in driver.title
    WebDriverWait(driver, 20).until(lambda d: model in d.find_element(By.ID, "model").text)
    driver.find_element(By.ID, "example-math").click()
    assert "Natalia" in driver.find_element(By.ID, "question").get_attribute("value")
    driver.find_element(By.ID, "run").click()
    WebDriverWait(driver, 60).until(
        lambda d: d.find_element(By.ID, "progress").is_displayed()
        or d.find_element(By.ID, "status").text.startswith("done"))
    WebDriverWait(driver, timeout).until(
        lambda d: d.find_element(By.ID, "status").text.startswith(("done", "error", "rejected")))
    status = driver.find_element(By.ID, "status").text
    assert status.startswith("done: ran to an answer"), status
    assert "Natalia" in driver.find_element(By.ID, "task").text
    assert not driver.find_element(By.ID, "progress").is_displayed()
    links = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#artifacts a")]
    assert "index.html" in links and "trace.jsonl" in links
