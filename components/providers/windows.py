"""Maintenance windows of the driver rollout (`gcu-stack:driverUpgrade.windows`): when a wave may start.

A window opens on each of its `days` at `start` (local time in its IANA `timeZone`) and closes at `end` that day, or
the next day when `end` is not after `start` (01:00-05:00 is one night; 22:00-02:00 crosses midnight; 24:00 is
midnight). No windows: always open. Pure: the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Optional
from zoneinfo import ZoneInfo

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class WindowState:
    open: bool
    closes: Optional[datetime] = None  # open: when the latest window holding `now` closes (None: no windows)
    opens: Optional[datetime] = None  # closed: when the next window opens

    def describe(self) -> str:
        if self.open:
            return "in a maintenance window" + (f" until {_when(self.closes)}" if self.closes else "")
        return f"outside the maintenance windows; the next opens {_when(self.opens)}"


def _when(moment: Optional[datetime]) -> str:
    if moment is None:
        return "never"
    utc = moment.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%MZ")
    return f"{moment.strftime('%a %Y-%m-%d %H:%M')} {moment.tzinfo} ({utc})"


def _clock(text: str) -> tuple[int, int]:
    hours, minutes = text.split(":")
    return int(hours), int(minutes)


def _at(day: date, text: str, zone: ZoneInfo) -> datetime:
    hours, minutes = _clock(text)
    return datetime.combine(day, time(0, 0), tzinfo=zone) + timedelta(hours=hours, minutes=minutes) \
        if hours == 24 else datetime.combine(day, time(hours, minutes), tzinfo=zone)


def _occurrences(window: dict, around: datetime):
    """(opens, closes) of each occurrence of `window` from the day before `around` to a week after."""
    zone = ZoneInfo(window.get("timeZone") or "UTC")
    local = around.astimezone(zone).date()
    days = set(window.get("days") or DAYS)
    for offset in range(-1, 8):
        day = local + timedelta(days=offset)
        if DAYS[day.weekday()] not in days:
            continue
        opens = _at(day, window["start"], zone)
        closes = _at(day, window["end"], zone)
        if closes <= opens:
            closes = _at(day + timedelta(days=1), window["end"], zone)
        yield opens, closes


def window_state(windows: list, now: datetime) -> WindowState:
    """Whether a wave may start at `now` (timezone-aware), and until when or from when."""
    if not windows:
        return WindowState(open=True)
    holding = [closes for w in windows for opens, closes in _occurrences(w, now) if opens <= now < closes]
    if holding:
        return WindowState(open=True, closes=max(holding))
    upcoming = [opens for w in windows for opens, _ in _occurrences(w, now) if opens > now]
    return WindowState(open=False, opens=min(upcoming) if upcoming else None)
