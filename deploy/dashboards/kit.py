"""The look every Gannet dashboard shares, on Grafana's own builders (``grafana-foundation-sdk``):
one call per panel (title, description, unit, PromQL targets, kind) and one per dashboard
(rows of panels, template variables). Grid positions come from the SDK's row/panel layout;
panel ids are numbered here so the JSON is stable.

Used by :mod:`deploy.dashboards.traffic` and :mod:`deploy.dashboards.internals` (the panels)
and :mod:`deploy.dashboards.build` (the files). Readers of a built dashboard (tests, the
real-Prometheus scenario) use :func:`panels`, :func:`expressions` and :func:`requires`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import prometheus as prometheus_models

Kind = Literal["timeseries", "stat", "table", "bargauge"]
DS = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
GRID_WIDTH = 24

MSGS = "suffix: msg/s"
MSGS_COUNT = "suffix: msgs"
OPS = "reqps"

# Template variables: name -> label_values() query. "datasource" is always first.
VARIABLE_QUERIES = {
    "cluster": "label_values(gannet_broker_ready, cluster)",
    "broker": 'label_values(gannet_broker_ready{cluster=~"$cluster"}, broker)',
    "topic": 'label_values(gannet_messages_in_total{cluster=~"$cluster"}, topic)',
    "group": 'label_values(gannet_consumer_lag_messages{cluster=~"$cluster"}, group)',
}
VARIABLE_LABELS = {"broker": "Broker group"}

PANEL_BUILDERS: dict[str, Callable[[], Any]] = {
    "timeseries": timeseries.Panel,
    "stat": stat.Panel,
    "table": table.Panel,
    "bargauge": bargauge.Panel,
}
Target = tuple[str, str]  # (PromQL, legend)
PanelBuilder = Any  # one of the SDK's panel builders (timeseries, stat, table, bargauge)
Row = tuple[str, tuple[PanelBuilder, ...]]


def t(expr: str, legend: str = "") -> Target:
    return (expr, legend)


def p(
    title: str,
    description: str,
    unit: str,
    *targets: Target,
    kind: Kind = "timeseries",
    width: int = 12,
    height: int = 8,
    stack: bool = False,
    thresholds: tuple[tuple[float, str], ...] = (),
) -> PanelBuilder:
    """One panel of ``kind`` with the shared field config, options and targets."""
    builder: PanelBuilder = PANEL_BUILDERS[kind]()
    steps = [models.Threshold(value=None, color="green")]
    if thresholds:
        steps = [
            models.Threshold(value=None if i == 0 else value, color=color)
            for i, (value, color) in enumerate(thresholds)
        ]
    builder.title(title).description(description).unit(unit).datasource(DS)
    builder.span(width).height(height)
    builder.thresholds(
        dashboard_builders.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE).steps(steps)
    )
    color = (
        models.FieldColorModeId.PALETTE_CLASSIC
        if kind == "timeseries"
        else models.FieldColorModeId.THRESHOLDS
    )
    builder.color_scheme(dashboard_builders.FieldColor().mode(color))
    if kind == "timeseries":
        stacking = common.StackingMode.NORMAL if stack else common.StackingMode.NONE
        builder.draw_style(common.GraphDrawStyle.LINE).line_width(1).fill_opacity(10)
        builder.show_points(common.VisibilityMode.NEVER)
        builder.stacking(common_builders.StackingConfig().mode(stacking).group("A"))
        builder.legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        builder.tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    elif kind == "table":
        builder.show_header(True).cell_height(common.TableCellHeight.SM)
    else:
        builder.reduce_options(
            common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
        )
        builder.orientation(common.VizOrientation.AUTO)
    for i, (expr, legend) in enumerate(targets):
        query = prometheus.Dataquery().expr(expr).legend_format(legend or "__auto")
        query.ref_id(chr(ord("A") + i)).datasource(DS)
        if kind == "table":
            query.instant().format(prometheus_models.PromQueryFormat.TABLE)
        else:
            query.range()
        builder.with_target(query)
    return builder


def row(title: str, panels: tuple[PanelBuilder, ...]) -> Row:
    return (title, panels)


def _variable(name: str) -> dashboard_builders.QueryVariable:
    query = VARIABLE_QUERIES[name]
    return (
        dashboard_builders.QueryVariable(name)
        .label(VARIABLE_LABELS.get(name, name.capitalize()))
        .datasource(DS)
        .query(query)
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(models.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .sort(models.VariableSort.ALPHABETICAL_ASC)
    )


def dashboard(
    uid: str,
    title: str,
    description: str,
    rows: Sequence[Row],
    *,
    variables: Sequence[str] = ("cluster", "broker"),
) -> models.Dashboard:
    """The dashboard model: the rows in order, each row's panels laid out left to right."""
    builder = (
        dashboard_builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["gannet"])
        .version(1)
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .timezone("browser")
        .refresh("30s")
        .time("now-1h", "now")
        .with_variable(
            dashboard_builders.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
        )
    )
    for name in variables:
        builder.with_variable(_variable(name))
    panel_id = 1
    for row_title, row_panels in rows:
        width = sum(panel.build().grid_pos.w for panel in row_panels)
        assert width % GRID_WIDTH in (0, 12), f"{uid}/{row_title}: rows fill whole or half lines"
        builder.with_row(dashboard_builders.Row(row_title).id(panel_id))
        panel_id += 1
        for panel in row_panels:
            builder.with_panel(panel.id(panel_id))
            panel_id += 1
    return builder.build()


# ---------------------------------------------------------------------- reading
def panels(built: models.Dashboard) -> Iterator[models.Panel]:
    """The panels of ``built`` in order, rows left out."""
    for panel in built.panels or []:
        if isinstance(panel, models.Panel):
            yield panel


def targets(panel: models.Panel) -> list[Target]:
    """(PromQL, legend) of each target of ``panel``, in order."""
    return [
        (target.expr, target.legend_format or "")
        for target in panel.targets or []
        if isinstance(target, prometheus_models.Dataquery)
    ]


def expressions(panel: models.Panel) -> list[str]:
    """The PromQL of each target of ``panel``, in order."""
    return [expr for expr, _ in targets(panel)]


def unit(panel: models.Panel) -> str:
    defaults = panel.field_config.defaults if panel.field_config is not None else None
    return (defaults.unit if defaults is not None else None) or ""


def requires(panel: models.Panel) -> str:
    """What must run for ``panel`` to have data: ``raft`` (replication wired), ``operator``
    (the operator scraped), ``tier`` (a broker with tiered storage) or ``""`` (any broker)."""
    joined = " ".join(expressions(panel))
    if "gannet_raft_" in joined:
        return "raft"
    if "gannet_tier_" in joined:
        return "tier"
    if "gannet_operator_" in joined:
        return "operator"
    return ""
