from django.urls import path

from reviews import views

app_name = "reviews"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("history/", views.history, name="history"),
    path("bulk/", views.bulk, name="bulk"),
    path("<uuid:proposal_id>/", views.detail, name="detail"),
    path("<uuid:proposal_id>/approve/", views.approve, name="approve"),
    path("<uuid:proposal_id>/reject/", views.reject, name="reject"),
]
