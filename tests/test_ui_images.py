"""The dashboard's images: the image route (confined to the store, by sha256 only, right content
type, ``nosniff``) and, in a real headless Chromium, the per-key step slider and the images of
sample rows, captions shown as text. Screenshots go to test-artifacts/ui/images-*.png."""

from __future__ import annotations

import numpy as np
import pytest

import trackstore
from tests.ui_support import ARTIFACTS, UiServer, chromium, chromium_paths, load, require_chromium, wait_for

pytest.importorskip("starlette")
PIL = pytest.importorskip("PIL.Image", reason="Pillow makes the JPEG fixture")

# its tests share a store, a server and a browser (module fixtures): one worker under `make test`
# (--dist loadgroup) sets them up once; spread over the workers, each set them up
pytestmark = pytest.mark.xdist_group("test_ui_images")

CAPTION = '<img src=x onerror="window.__pwned=1">step caption'


def _gradient(step: int) -> np.ndarray:
    """A 48x64 picture that visibly changes with the step: a bar moving right on a gradient."""
    a = np.zeros((48, 64, 3), dtype=np.uint8)
    a[..., 0] = np.linspace(0, 255, 64, dtype=np.uint8)[None, :]
    a[..., 2] = 120
    a[:, step * 12:step * 12 + 8] = (255, 255, 255)
    return a


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-images")
    root = tmp / "store"
    jpg = tmp / "photo.jpg"
    PIL.new("RGB", (40, 30), (30, 160, 60)).save(jpg, quality=90)
    run = trackstore.init("vlm", name="imgs", root=root)
    for s in range(5):
        run.log({"loss": 1.0 / (s + 1), "rollout/frame": trackstore.Image(_gradient(s), caption=f"{CAPTION} {s}"),
                 "val/pair": [trackstore.Image(jpg, caption="photo"), trackstore.Image(_gradient(4 - s))]}, step=s)
    run.log_samples([{"input": [{"role": "user", "content": [{"type": "image", "image": trackstore.Image(jpg)},
                                                              "what is in the picture?"]}],
                      "output": "a green rectangle", "score": 1.0,
                      "render": trackstore.Image(_gradient(2), caption="model render")}], step=4)
    run.finish()
    server = UiServer(root, tmp)
    yield server, run, jpg
    server.stop()


def test_the_image_route_serves_only_the_runs_files_by_digest(site):
    server, run, jpg = site
    ref = f"vlm/{run.id}"
    con = trackstore.connect(root=run.root)
    rows = con.sql("SELECT sha256, format FROM images ORDER BY step, key, index").fetchall()
    sha_jpg = next(s for s, f in rows if f == "jpeg")
    status, headers, body = server.request(f"/api/image?run={ref}&sha256={sha_jpg}")
    headers = {k.lower(): v for k, v in headers.items()}
    assert status == 200 and body == jpg.read_bytes()
    assert headers["content-type"] == "image/jpeg" and headers["x-content-type-options"] == "nosniff"
    sha_png = next(s for s, f in rows if f == "png")
    status, headers, _ = server.request(f"/api/image?run={ref}&sha256={sha_png}")
    assert status == 200 and {k.lower(): v for k, v in headers.items()}["content-type"] == "image/png"
    for bad in ("../run.json", "media/../../run.json", sha_png.upper(), sha_png[:-1], "", "%2e%2e%2frun.json"):
        status, _h, body = server.request(f"/api/image?run={ref}&sha256={bad}")
        assert status in (400, 404), (bad, status, body[:200])
    status, _h, _b = server.request(f"/api/image?run={ref}&sha256={'0' * 64}")
    assert status == 404
    status, _h, _b = server.request(f"/api/image?run=vlm/nope&sha256={sha_png}")
    assert status == 404
    data = server.json(f"/api/images?run={ref}&key=rollout/frame")
    assert [s["step"] for s in data["steps"]] == [0, 1, 2, 3, 4]
    assert data["steps"][2]["images"][0]["caption"] == f"{CAPTION} 2"


needs_browser = pytest.mark.skipif(chromium_paths() is None, reason="chromium and chromedriver are not installed "
                                   "(make install-browser, or apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def browser(site):
    require_chromium()
    with chromium() as d:
        yield d


def _loaded_images(browser, css: str) -> list[dict]:
    return browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(i => ({src: i.getAttribute('src'), w: i.naturalWidth,"
        " h: i.naturalHeight, done: i.complete, cap: (i.parentElement.querySelector('figcaption') || {}).textContent}))",
        css)


@needs_browser
def test_the_images_page_has_a_step_slider_per_key(site, browser):
    server, run, _jpg = site
    load(browser, server.url + f"#/images/vlm/{run.id}")
    wait_for(lambda: len(browser.execute_script("return document.querySelectorAll('input.slider')")) == 2,
             what="a slider per image key")
    keys = browser.execute_script("return [...document.querySelectorAll('h2')].map(h => h.textContent)")
    assert keys == ["rollout/frame", "val/pair"]
    # the last step first; its images loaded from the image route, captions as text
    shots = wait_for(lambda: (r := _loaded_images(browser, ".image-key img")) and all(i["done"] and i["w"] for i in r) and r,
                     what="the images to load")
    assert [(i["w"], i["h"]) for i in shots] == [(64, 48), (40, 30), (64, 48)]
    assert shots[0]["cap"] == f"{CAPTION} 4" and browser.execute_script("return typeof window.__pwned") == "undefined"
    labels = browser.execute_script("return [...document.querySelectorAll('.step-label')].map(l => l.textContent)")
    assert labels[0].startswith("step 4")
    browser.save_screenshot(str(ARTIFACTS / "images-slider-last-step.png"))
    # move the first slider to step 1: the label, the caption and the picture follow
    browser.execute_script("const s = document.querySelector('input.slider'); s.value = 1;"
                           "s.dispatchEvent(new Event('input', {bubbles: true}));")
    first = wait_for(lambda: (r := _loaded_images(browser, ".image-key:first-of-type img, .image-key img"))
                     and r[0]["cap"] == f"{CAPTION} 1" and r[0]["done"] and r[0]["w"] and r, what="step 1's image")
    assert browser.execute_script("return document.querySelector('.step-label').textContent").startswith("step 1")
    con = trackstore.connect(root=run.root)
    sha1 = con.sql("SELECT sha256 FROM images WHERE key = 'rollout/frame' AND step = 1").fetchall()[0][0]
    assert sha1 in first[0]["src"]
    # the page draws what the store holds: the pixels the browser decoded are the logged ones
    drawn = browser.execute_script(
        "const i = document.querySelector('.image-key img'); const c = document.createElement('canvas');"
        "c.width = i.naturalWidth; c.height = i.naturalHeight; const x = c.getContext('2d'); x.drawImage(i, 0, 0);"
        "return Array.from(x.getImageData(0, 0, c.width, c.height).data);")
    assert (np.array(drawn, dtype=np.uint8).reshape(48, 64, 4)[..., :3] == _gradient(1)).all()
    browser.save_screenshot(str(ARTIFACTS / "images-slider-step-1.png"))


@needs_browser
def test_sample_rows_show_their_images(site, browser):
    server, run, jpg = site
    load(browser, server.url + f"#/samples/vlm/{run.id}")
    shots = wait_for(lambda: (r := _loaded_images(browser, "#samples img")) and len(r) == 2
                     and all(i["done"] and i["w"] for i in r) and r, what="the sample's two images")
    assert [(i["w"], i["h"]) for i in shots] == [(40, 30), (64, 48)]
    assert shots[1]["cap"] == "model render"
    text = browser.execute_script("return document.querySelector('#samples tbody tr').cells[4].textContent")
    assert "what is in the picture?" in text and "[image 40×30]" in text
    browser.save_screenshot(str(ARTIFACTS / "images-samples.png"))
